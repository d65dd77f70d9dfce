"""Chat requests for SmolLM2-Instruct built from templates: a training pool for distillation and a disjoint held-out set.

The held-out set (`heldout_chat_prompts()`) is what benchmarks and README command 1 use; no item of it (task, concept,
sentence, topic) appears in the training pool, which `examples/distill_smollm2.py` answers with SmolLM2 itself.
"""
from __future__ import annotations

import random

CODE_TASKS = [
    "checks whether a number is prime", "reverses a string", "returns the n-th Fibonacci number",
    "counts the vowels in a string", "merges two sorted lists", "removes duplicates from a list while keeping order",
    "computes the factorial of n", "checks whether a string is a palindrome", "flattens a nested list",
    "finds the largest element of a list", "converts Celsius to Fahrenheit", "computes the greatest common divisor",
    "sorts a list of dictionaries by a key", "counts word frequencies in a text", "checks whether two strings are anagrams",
    "returns the sum of the digits of an integer", "transposes a matrix", "finds the second largest number in a list",
    "validates an email address with a regular expression", "reads a CSV file and returns its rows",
    "computes the mean and standard deviation of a list", "implements binary search", "implements bubble sort",
    "converts a decimal number to binary", "capitalizes the first letter of every word", "chunks a list into pieces of size n",
    "finds all prime numbers below n", "checks whether a year is a leap year", "computes the power set of a set",
    "rotates a list by k positions", "returns the longest word in a sentence", "parses a date string into a datetime",
    "counts the lines in a file", "computes the dot product of two vectors", "generates a random password",
    "implements a stack class", "implements a queue with two stacks", "finds the intersection of two lists",
    "computes the median of a list", "checks whether parentheses are balanced", "converts a Roman numeral to an integer",
    "computes compound interest", "returns the most common element of a list", "implements quicksort",
    "removes punctuation from a string", "computes the area of a circle", "finds the missing number in 1..n",
    "zips two lists into a dictionary", "checks whether a list is sorted", "implements a simple LRU cache",
]
HELDOUT_CODE_TASKS = [
    "returns the number of uppercase letters in a string", "computes the least common multiple of two numbers",
    "splits a sentence into words and sorts them alphabetically", "implements merge sort",
    "checks whether a number is a perfect square", "returns the first non-repeated character of a string",
    "converts a list of tuples into a dictionary", "computes the Hamming distance between two strings",
]
LANGUAGES = ["Python", "JavaScript"]
CONCEPTS = [
    "photosynthesis", "gravity", "the water cycle", "inflation", "machine learning", "a black hole", "DNA",
    "the internet", "climate change", "supply and demand", "electricity", "vaccines", "the stock market",
    "recursion", "encryption", "the immune system", "volcanoes", "democracy", "renewable energy", "the moon's phases",
    "neural networks", "blockchain", "evolution", "the greenhouse effect", "compound interest", "an operating system",
    "the French Revolution", "plate tectonics", "a database index", "antibiotics", "the speed of light", "hash tables",
    "the Pythagorean theorem", "cloud computing", "ocean tides", "the Roman Empire", "a CPU cache", "probability",
]
HELDOUT_CONCEPTS = ["rainbows", "the printing press", "a compiler", "earthquakes", "bitcoin mining", "the heart",
                    "version control", "solar eclipses"]
CONCEPT_TEMPLATES = ["Explain {} in simple terms.", "What is {}?", "Give a short explanation of {} for a child.",
                     "Why is {} important?"]
SENTENCES = [
    "Where is the train station?", "I would like a cup of coffee, please.", "The weather is beautiful today.",
    "How much does this book cost?", "My brother works at a hospital.", "We are going to the beach tomorrow.",
    "Thank you very much for your help.", "I am learning to cook.", "The meeting starts at nine o'clock.",
    "Can you recommend a good restaurant?", "She reads a book every week.", "The children are playing in the park.",
    "I lost my keys yesterday.", "This city has many old buildings.", "Please close the window.",
    "He is my best friend.", "I need to buy some bread.", "The museum is closed on Mondays.",
]
HELDOUT_SENTENCES = ["Good morning, how are you?", "The cat is sleeping on the sofa.", "I love reading books.",
                     "What time is it?"]
TARGET_LANGUAGES = ["Korean", "Arabic", "Japanese", "French", "Spanish", "German", "Chinese", "Italian"]
LIST_THINGS = [
    "tips for better sleep", "healthy breakfast ideas", "programming languages", "countries in Europe",
    "benefits of exercise", "ways to save money", "famous scientists", "fruits rich in vitamin C",
    "things to pack for a trip", "ideas for a birthday party", "common interview questions", "musical instruments",
    "ways to reduce stress", "planets in the solar system", "board games for families", "uses of Python",
    "tips for learning a language", "ways to be more productive", "animals that live in the ocean",
    "classic novels", "kitchen tools", "reasons to learn math", "outdoor activities", "data structures",
]
HELDOUT_LIST_THINGS = ["tips for writing clean code", "vegetables that grow fast", "ways to stay focused",
                       "sports played with a ball"]
JSON_ENTITIES = [
    ("a book", "title, author, year"), ("a person", "name, age, email"), ("a movie", "title, director, rating"),
    ("a product", "name, price, in_stock"), ("a city", "name, country, population"),
    ("a car", "make, model, year"), ("a recipe", "name, ingredients, minutes"), ("a song", "title, artist, length"),
    ("a student", "name, grade, subjects"), ("an event", "name, date, location"),
    ("a laptop", "brand, ram_gb, price"), ("a restaurant", "name, cuisine, rating"),
]
HELDOUT_JSON_ENTITIES = [("a hotel", "name, stars, city"), ("a planet", "name, moons, diameter_km"),
                         ("an employee", "name, role, salary"), ("a flight", "number, origin, destination")]
WRITING = [
    "Write a short poem about the sea.", "Write a haiku about autumn.", "Write a short story about a lost dog.",
    "Write an email asking my manager for a day off.", "Write a thank-you note to a teacher.",
    "Write a product description for a water bottle.", "Summarize the plot of Romeo and Juliet.",
    "Write a tweet announcing a new coffee shop.", "Write a limerick about a cat.",
    "Write a short motivational message for a student.", "Describe a sunset in three sentences.",
    "Write a short dialogue between a customer and a waiter.",
]
HELDOUT_WRITING = ["Write a short poem about the mountains.", "Write an email inviting a friend to dinner.",
                   "Summarize the story of Cinderella.", "Write a short story about a robot learning to paint."]


def _code(tasks):
    out = []
    for task in tasks:
        out.append(f"Write a Python function that {task}.")
        out.append(f"Write a JavaScript function that {task}.")
    return out


def _items(concepts, sentences, things, entities, writing, code_tasks, rng):
    prompts = {"code": _code(code_tasks)}
    prompts["explain"] = [t.format(c) for c in concepts for t in rng.sample(CONCEPT_TEMPLATES, 2)]
    prompts["translate"] = [f"Translate into {lang}: {s}" for s in sentences for lang in TARGET_LANGUAGES]
    prompts["list"] = [f"List {n} {t}." for t in things for n in rng.sample([3, 5, 7], 2)]
    prompts["json"] = [f"Return a JSON object describing {e} with the fields {f}." for e, f in entities]
    prompts["json"] += [f"Give me a JSON list of three examples of {e} with the fields {f}." for e, f in entities]
    prompts["write"] = list(writing)
    return prompts


def training_chat_prompts(seed: int = 0) -> list[str]:
    """The distillation pool: ~700 chat requests, none sharing an item with the held-out set."""
    rng = random.Random(seed)
    groups = _items(CONCEPTS, SENTENCES, LIST_THINGS, JSON_ENTITIES, WRITING, CODE_TASKS, rng)
    prompts = [p for group in groups.values() for p in group]
    rng.shuffle(prompts)
    return prompts


def heldout_chat_prompts() -> list[str]:
    """42 held-out chat requests: code, explanations, translation (Korean/Arabic/Japanese/...), lists, JSON, writing."""
    rng = random.Random(1)
    code = _code(HELDOUT_CODE_TASKS)[::2] + _code(HELDOUT_CODE_TASKS)[1:4:2]  # 8 Python + 2 JavaScript
    explain = [rng.choice(CONCEPT_TEMPLATES).format(c) for c in HELDOUT_CONCEPTS]
    translate = [f"Translate into {lang}: {s}" for s, lang in
                 zip(HELDOUT_SENTENCES * 3, ["Korean", "Arabic", "Japanese", "French", "Japanese", "Korean",
                                             "Arabic", "Spanish", "German", "Chinese", "Korean", "Italian"])]
    lists = [f"List {n} {t}." for t, n in zip(HELDOUT_LIST_THINGS, [5, 3, 7, 5])]
    json_ = [f"Return a JSON object describing {e} with the fields {f}." for e, f in HELDOUT_JSON_ENTITIES]
    groups = [code, explain, translate, lists, json_, HELDOUT_WRITING]
    # interleave categories so that any prefix of the list is a mix
    out, i = [], 0
    while any(i < len(g) for g in groups):
        out += [g[i] for g in groups if i < len(g)]
        i += 1
    return out


_SNIPPETS = [
    "def average(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(value)\n",
    "def find_max(items):\n    best = items[0]\n    for item in items:\n        if item > best\n            best = item\n    return best\n",
    "def count_words(text):\n    counts = {}\n    for word in text.split():\n        counts[word] = counts.get(word, 0) + 1\n    return counts\n",
    "def is_even(n):\n    if n % 2 == 0:\n        return True\n    else:\n        return False\n",
]
_PARAGRAPHS = [
    "Yesterday me and my friend goes to the market for buying some vegetable. The weather were very nice and we "
    "was walking slowly. When we arrived, the shop have already closed, so we decide to drink a coffee instead.",
    "The meeting is schedule for monday at 10 am in the main office. Please bring you laptop and the report that "
    "we discussed last week, because the manager want to review it before the end of the month.",
    "On March 3, 2021 the company opened its first store in Lisbon. A second store followed on July 15, 2022 in "
    "Porto, and on January 9, 2024 the company announced plans for a store in Madrid.",
]


def grounded_chat_prompts() -> list[str]:
    """12 input-grounded requests (fix / rewrite / annotate / extract text the user gives): where an answer
    repeats much of its input, so n-gram prompt lookup drafts well. Held out: none is in the training pool."""
    code, prose = _SNIPPETS, _PARAGRAPHS
    return [
        f"Fix the bug in this Python function and return the corrected code:\n\n{code[0]}",
        f"Fix the syntax error in this Python code:\n\n{code[1]}",
        f"Add type hints and a docstring to this Python function:\n\n{code[2]}",
        f"Add a comment to every line of this Python function:\n\n{code[3]}",
        f"Correct the grammar of this paragraph:\n\n{prose[0]}",
        f"Correct the spelling and grammar mistakes in this text:\n\n{prose[1]}",
        f"Extract all the dates from this text as a list:\n\n{prose[2]}",
        f"Rewrite this Python function to use a list comprehension or built-ins where possible:\n\n{code[2]}",
        f"Rewrite this paragraph in the past tense, changing nothing else:\n\n{prose[1]}",
        f"Rename the variables in this function to more descriptive names:\n\n{code[0]}",
        f"Convert this Python function to JavaScript:\n\n{code[3]}",
        f"Put this text into a bulleted list, one sentence per bullet:\n\n{prose[2]}",
    ]


# A wider pool for the feature head (`head_training_prompts()`): the same request families with new items, none of
# them a held-out item or a near paraphrase of one (stage 5 of the head: docs/models.md).
WIDE_CODE_TASKS = [
    "returns the average of a list of numbers", "counts the words in a sentence",
    "checks whether a string contains only digits", "finds the minimum of a list without using min",
    "squares every number in a list", "filters the even numbers from a list",
    "returns the longest common prefix of a list of strings", "converts a string to title case",
    "computes the n-th triangular number", "checks whether a number is an Armstrong number",
    "returns the unique characters of a string", "counts the occurrences of a character in a string",
    "converts a binary string to a decimal number", "computes the sum of a list recursively", "merges two dictionaries",
    "inverts a dictionary", "sorts a list of strings by length", "strips the whitespace from every string in a list",
    "finds the index of an element in a list", "checks whether all elements of a list are equal",
    "computes the cumulative sum of a list", "returns every other element of a list", "converts kilometers to miles",
    "computes the body mass index", "computes the distance between two points", "returns the last n elements of a list",
    "prints the multiplication table of a number", "converts a string to snake_case", "converts a string to camelCase",
    "counts the set bits of an integer", "checks whether a string is a valid IPv4 address",
    "computes the area of a triangle from its three sides", "returns the keys of a dictionary sorted by value",
    "groups a list of words by their first letter", "finds the longest increasing subsequence",
    "implements insertion sort", "implements selection sort", "inserts a value into a binary search tree",
    "implements a linked list class", "reverses a linked list", "checks whether a number is a power of two",
    "returns the prime factors of a number", "sums the even Fibonacci numbers below n",
    "replaces every vowel in a string with an asterisk", "finds the common elements of three lists", "shuffles a list",
    "picks a random element from a list", "returns the range of a list of numbers",
    "converts a list of strings to integers", "truncates a string to n characters",
    "pads a number with leading zeros", "formats a number with thousands separators",
    "parses a URL query string into a dictionary", "writes a list of rows to a CSV file",
    "reads a JSON file and returns its contents", "computes the average word length of a sentence",
    "returns the n most frequent words of a text", "computes the running maximum of a list",
    "checks whether a matrix is symmetric", "multiplies two matrices", "adds two matrices",
    "computes the determinant of a 2x2 matrix", "encodes a string with the Caesar cipher",
    "converts an integer to a Roman numeral", "checks whether a sentence is a pangram",
    "returns the day of the week for a date", "computes the number of days between two dates",
    "converts seconds into hours, minutes and seconds", "implements a counter class with increment and reset",
    "memoizes a function with a dictionary", "retries a function up to three times",
    "measures how long a function takes to run", "splits a list into two halves", "interleaves two lists",
    "removes the None values from a list", "finds the first duplicate in a list",
]
WIDE_CONCEPTS = [
    "the nitrogen cycle", "osmosis", "magnetism", "sound waves", "the Big Bang", "a neuron", "the digestive system",
    "friction", "nuclear fusion", "the carbon cycle", "an atom", "the life cycle of a star", "the Industrial Revolution",
    "the Renaissance", "the Cold War", "the Great Depression", "the Silk Road", "ancient Egypt",
    "the scientific method", "a virus", "bacteria", "mitosis", "genetic mutations", "the periodic table",
    "chemical reactions", "acids and bases", "the ozone layer", "deforestation", "biodiversity", "the food chain",
    "erosion", "glaciers", "hurricanes", "tornadoes", "the seasons", "time zones", "taxes", "interest rates",
    "a budget", "credit scores", "globalization", "the United Nations", "elections", "human rights", "an algorithm",
    "an API", "a web browser", "a search engine", "artificial intelligence", "computer memory", "a GPU",
    "open source software", "a firewall", "quantum computing", "binary numbers", "Big O notation", "a linked list",
    "sorting algorithms", "object-oriented programming", "a virtual machine", "Wi-Fi", "GPS", "3D printing",
    "solar panels", "wind turbines", "electric cars", "batteries", "a rocket", "the International Space Station",
    "Mars", "the Milky Way", "a comet", "meditation", "sleep", "nutrition", "calories", "metabolism", "allergies",
    "the placebo effect", "memory", "emotions", "habits", "motivation", "leadership", "teamwork", "marketing",
    "a startup", "statistics", "fractions", "prime numbers", "algebra", "geometry", "calculus", "infinity",
]
WIDE_SENTENCES = [
    "I am going to the supermarket.", "Do you speak English?", "The bus is late again.", "My favorite color is blue.",
    "We had dinner at a small restaurant.", "The doctor will see you now.", "It is raining outside.",
    "I have two sisters and one brother.", "Could you help me carry this box?", "The library opens at eight.",
    "She is studying medicine at university.", "I forgot my umbrella at home.", "The train leaves in ten minutes.",
    "This soup is too hot.", "Let's meet in front of the cinema.", "He plays the guitar very well.",
    "The flowers in the garden are blooming.", "I would like to book a room for two nights.",
    "Where can I find a pharmacy?", "The store closes at six in the evening.", "My phone battery is almost empty.",
    "We watched a movie last night.", "Please turn off the lights.", "The dog is barking at the mailman.",
    "I am very happy to meet you.", "How do I get to the airport?", "The exam was easier than I expected.",
    "They moved to a new apartment.", "Happy birthday, my friend!", "The river flows through the city.",
    "Can I pay by credit card?", "My grandmother tells wonderful stories.", "The computer is not working.",
    "We need more chairs for the party.", "It is cold here in winter.", "I am tired after a long day.",
    "The teacher explained the lesson clearly.", "Don't forget to call your mother.",
]
WIDE_LIST_THINGS = [
    "ways to learn faster", "popular dog breeds", "tips for a job interview", "foods high in protein",
    "ways to reduce plastic waste", "famous painters", "tips for public speaking", "hobbies to try at home",
    "reasons to read more books", "ways to improve your writing", "features of a good website", "types of clouds",
    "famous landmarks in Asia", "ways to make new friends", "healthy snacks", "tips for remote work",
    "benefits of drinking water", "types of renewable energy", "ways to improve memory", "common cooking spices",
    "tips for saving energy at home", "ways to keep a house clean", "inventions that changed the world",
    "tips for studying for exams", "ways to relax after work", "types of triangles", "common logical fallacies",
    "features of Python", "useful Linux commands", "git commands for beginners", "birds that cannot fly",
    "tips for traveling on a budget", "summer activities for kids", "things to do on a rainy day",
    "qualities of a good leader", "tips for taking better photos", "desserts from France", "rivers in Africa",
    "famous mountains", "ancient civilizations", "famous composers", "yoga poses for beginners",
    "ways to prevent the flu", "types of pasta", "programming paradigms", "car maintenance tips",
]
WIDE_JSON_ENTITIES = [
    ("a country", "name, capital, population"), ("a company", "name, industry, employees"),
    ("a smartphone", "brand, storage_gb, price"), ("a book review", "title, reviewer, stars"),
    ("a pet", "name, species, age"), ("a course", "title, teacher, credits"), ("a painting", "title, artist, year"),
    ("a video game", "title, genre, players"), ("a user account", "username, email, is_active"),
    ("a weather report", "city, temperature, condition"), ("an order", "id, items, total"),
    ("a podcast", "title, host, episodes"), ("a museum", "name, city, founded"),
    ("a bank account", "owner, balance, currency"), ("a tree", "species, height_m, age"),
    ("a sports team", "name, sport, players"), ("a language", "name, speakers, family"),
    ("a mountain", "name, height_m, country"), ("a website", "url, title, visits"),
]
WIDE_WRITING = [
    "Write a short poem about the rain.", "Write a haiku about winter.", "Write a short story about a brave mouse.",
    "Write an email to a colleague asking for feedback on a report.", "Write a birthday message for my sister.",
    "Write a product description for a pair of running shoes.", "Summarize the plot of The Little Prince.",
    "Write a tweet about a new book release.", "Write a limerick about a dog.", "Write a short graduation speech.",
    "Describe a forest in the morning in three sentences.",
    "Write a short dialogue between two friends planning a trip.",
    "Write a cover letter for a junior developer position.", "Write a short review of a pizza restaurant.",
    "Write an apology email for missing a meeting.", "Write a poem about friendship.", "Write a haiku about the ocean.",
    "Write a short story about a dragon who is afraid of fire.", "Write a welcome message for new members of a club.",
    "Write a text message reminding a friend about lunch.", "Summarize the story of Snow White.",
    "Write a slogan for a bakery.", "Write a short bio for a software engineer.", "Write a recipe for pancakes.",
    "Describe a busy city street in three sentences.", "Write a short fable with a moral.",
    "Write an email to a landlord about a broken heater.", "Write a short poem about the stars.",
    "Write a motivational quote about learning.", "Write a job posting for a barista.",
    "Write instructions for planting a tree.", "Write a short story about a time traveler.",
    "Write a thank-you email after a job interview.", "Summarize the plot of Hamlet.",
    "Write a riddle and its answer.", "Write a short introduction for a gardening club newsletter.",
]
WIDE_SNIPPETS = [
    "def total_price(items):\n    total = 0\n    for item in items:\n        total += item['price'] * item['qty']\n"
    "    return totl\n",
    "def greet(name)\n    print('Hello, ' + name)\n",
    "def square_all(numbers):\n    result = []\n    for n in numbers:\n        result.append(n * n)\n"
    "    return result\n",
    "def longest(words):\n    best = ''\n    for w in words:\n        if len(w) > len(best):\n            best = w\n"
    "    return best\n",
    "def fahrenheit(c):\n    return c * 9 / 5 + 32\n",
    "def count_positive(xs):\n    n = 0\n    for x in xs:\n        if x > 0:\n            n = n + 1\n    return n\n",
    "def first_upper(s):\n    for ch in s:\n        if ch.isupper():\n            return ch\n    return None\n",
    "def join_names(a, b):\n    return a + ' ' + b\n",
    "def safe_div(a, b):\n    if b = 0:\n        return None\n    return a / b\n",
    "def evens(n):\n    out = []\n    for i in range(n):\n        if i % 2 == 0:\n            out.append(i)\n"
    "    return out\n",
]
WIDE_PARAGRAPHS = [
    "Last summer we travels to Italy with my parents. The food were delicious and the people was very friendly. "
    "We visited Rome, Florence and Venice, and we takes a lot of photos.",
    "The new library will open on April 12, 2025. Its first exhibition runs until June 30, 2025, and a reading "
    "festival is planned for September 5, 2025.",
    "My sister have a small bakery in the center of town. Every morning she wake up at five to bake bread, and "
    "the customers always says that her croissants is the best.",
    "The project started in January 2020. The first version was released on October 1, 2021, and the team "
    "published a major update on May 20, 2023.",
    "I am writing to inform you that your order has been shipped. It should arrive within three days. If you have "
    "any questions, please contact our support team.",
    "Our team finish the report yesterday, but the manager say that some numbers is wrong. We needs to check "
    "everything again before friday.",
]


def _grounded(snippets, paragraphs):
    code_tasks = ["Fix the bug in this Python function and return the corrected code:",
                  "Add type hints and a docstring to this Python function:",
                  "Add a comment to every line of this Python function:",
                  "Rewrite this Python function to use a list comprehension or built-ins where possible:",
                  "Rename the variables in this function to more descriptive names:",
                  "Convert this Python function to JavaScript:", "Explain what this Python function does:"]
    prose_tasks = ["Correct the grammar of this paragraph:", "Correct the spelling and grammar mistakes in this text:",
                   "Extract all the dates from this text as a list:",
                   "Rewrite this paragraph in the past tense, changing nothing else:",
                   "Put this text into a bulleted list, one sentence per bullet:",
                   "Summarize this text in one sentence:"]
    return ([f"{t}\n\n{s}" for s in snippets for t in code_tasks]
            + [f"{t}\n\n{p}" for p in paragraphs for t in prose_tasks])


def head_training_prompts(seed: int = 0) -> list[str]:
    """The feature head's pool: the distillation pool plus the same families over new items (~1,800 requests), every
    concept under every template, and input-grounded requests over other snippets and paragraphs; disjoint from the
    held-out chat and grounded sets."""
    rng = random.Random(seed)
    groups = _items(CONCEPTS + WIDE_CONCEPTS, SENTENCES + WIDE_SENTENCES, LIST_THINGS + WIDE_LIST_THINGS,
                    JSON_ENTITIES + WIDE_JSON_ENTITIES, WRITING + WIDE_WRITING, CODE_TASKS + WIDE_CODE_TASKS, rng)
    groups["explain"] += [t.format(c) for c in CONCEPTS + WIDE_CONCEPTS for t in CONCEPT_TEMPLATES]
    groups["list"] += [f"List {n} {t}." for t in LIST_THINGS + WIDE_LIST_THINGS for n in (3, 5, 7)]
    groups["grounded"] = _grounded(WIDE_SNIPPETS, WIDE_PARAGRAPHS)
    held = set(heldout_chat_prompts()) | set(grounded_chat_prompts())
    prompts = sorted({p for group in groups.values() for p in group} - held)
    rng.shuffle(prompts)
    return training_chat_prompts(seed) + [p for p in prompts if p not in set(training_chat_prompts(seed))]
