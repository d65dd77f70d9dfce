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


# The third wave (stage 7): the same request families over items in neither pool above nor the held-out sets.
MORE_CODE_TASKS = [
    "returns the number of words that start with a capital letter", "checks whether a list contains duplicates",
    "computes the sum of the squares of the first n numbers", "returns the n-th prime number",
    "converts hexadecimal to decimal", "counts the number of digits in an integer", "reverses the words of a sentence",
    "removes the vowels from a string", "returns the maximum depth of a nested list", "computes the product of a list",
    "finds the pair of numbers in a list that sums to a target", "checks whether a number is even or odd",
    "returns the characters that appear in both strings", "computes the average of the values of a dictionary",
    "counts the uppercase and lowercase letters of a string", "finds the longest palindrome in a string",
    "returns the digits of a number as a list", "sorts a list of tuples by their second element",
    "computes the simple interest", "checks whether a triangle is valid from three sides",
    "returns the number of days in a month", "converts a temperature from Fahrenheit to Celsius",
    "computes the perimeter of a rectangle", "generates the first n rows of Pascal's triangle",
    "checks whether two lists have the same elements", "returns the smallest missing positive integer",
    "converts a dictionary to a list of tuples", "finds the mode of a list", "computes the variance of a list",
    "checks whether a string starts with a vowel", "returns the index of the largest element",
    "counts the number of even and odd numbers in a list", "removes all occurrences of a value from a list",
    "computes the sum of all numbers in a nested list", "checks whether a number is a palindrome",
    "returns a list of the squares of the odd numbers", "converts a sentence to pig latin",
    "computes the nth power of a number without using **", "finds the k largest elements of a list",
    "returns the frequency of each character in a string", "merges overlapping intervals",
    "rotates a matrix by 90 degrees", "checks whether a Sudoku row is valid", "implements a binary tree traversal",
    "computes the height of a binary tree", "implements a priority queue with heapq",
    "checks whether a graph has a cycle", "implements breadth-first search on a graph",
    "implements depth-first search on a graph", "finds the shortest path in an unweighted graph",
    "implements counting sort", "implements heap sort", "returns all permutations of a string",
    "returns all combinations of k elements from a list", "computes the edit distance between two strings",
    "checks whether a string has all unique characters", "compresses a string with run-length encoding",
    "decodes a run-length encoded string", "validates a phone number with a regular expression",
    "extracts all the numbers from a string", "counts the sentences in a paragraph",
    "converts a list of words to a single string separated by commas", "returns the initials of a full name",
    "checks whether a password is strong", "converts minutes to hours and minutes",
    "computes the age of a person from a birth year", "returns the next leap year after a given year",
    "converts a number to its English words", "simulates rolling two dice", "simulates flipping a coin n times",
    "implements a simple bank account class", "implements a to-do list class", "implements a rectangle class with area",
    "implements a temperature converter class", "finds the maximum sum of a contiguous subarray",
    "moves all zeros of a list to the end", "returns the elements that appear exactly once in a list",
    "checks whether one string is a rotation of another", "removes the duplicate words from a sentence",
    "returns the sum of the diagonal of a square matrix",
]
MORE_CONCEPTS = [
    "cells", "the solar system", "light", "energy", "heat", "weather", "clouds", "the atmosphere", "oxygen",
    "carbon dioxide", "fossil fuels", "nuclear power", "the human brain", "blood", "the lungs", "bones", "muscles",
    "the skin", "hormones", "genes", "proteins", "enzymes", "viruses and bacteria", "pollination", "migration",
    "ecosystems", "coral reefs", "rainforests", "deserts", "the Amazon river", "gravity on the moon", "satellites",
    "telescopes", "a microscope", "magnets", "static electricity", "circuits", "a transistor", "semiconductors",
    "the binary system", "a programming language", "a variable in programming", "a function in programming",
    "a loop in programming", "an array", "a dictionary in Python", "a class in programming", "unit testing",
    "debugging", "a bug in software", "the cloud", "a server", "an IP address", "DNS", "HTTP", "email",
    "social media", "a smartphone", "a password manager", "two-factor authentication", "phishing", "a spreadsheet",
    "data science", "big data", "a chatbot", "robotics", "self-driving cars", "virtual reality", "augmented reality",
    "the Moon landing", "World War I", "World War II", "the Roman Republic", "ancient Greece", "the Middle Ages",
    "the Vikings", "the printing of money", "banks", "loans", "a mortgage", "insurance", "the economy",
    "unemployment", "trade", "a currency", "a recession", "a monopoly", "capitalism", "a constitution",
    "the rule of law", "free speech", "philosophy", "ethics", "logic", "critical thinking", "creativity",
    "empathy", "stress", "exercise", "vitamins", "hydration", "a balanced diet",
]
MORE_SENTENCES = [
    "I live in a small house near the river.", "What is your name?", "The shop is around the corner.",
    "I drink tea every morning.", "My father is a teacher.", "The park is full of people today.",
    "Where do you work?", "I would like to order a pizza.", "The movie starts at eight.", "I am sorry, I am late.",
    "Can you speak more slowly, please?", "The water is very cold.", "We are planning a trip to the mountains.",
    "My sister loves to dance.", "The hotel is next to the beach.", "I don't understand the question.",
    "This is my first time here.", "The bread is fresh from the oven.", "He runs five kilometers every day.",
    "Please wait a moment.", "The baby is sleeping.", "I need a doctor.", "How old are you?",
    "The bank is closed today.", "We play football on Sundays.", "My car is in the garage.",
    "The sky is clear tonight.", "I am looking for the post office.", "She speaks three languages.",
    "The concert was amazing.", "Do you have a map of the city?", "I like to walk in the evening.",
    "The store sells fresh vegetables.", "My room is on the second floor.", "The coffee is too sweet.",
    "We will arrive tomorrow morning.", "Is there a bus to the center?", "I am allergic to nuts.",
    "The garden needs water.", "See you next week!",
]
MORE_LIST_THINGS = [
    "tips for eating healthy", "ways to stay motivated", "famous inventors", "countries in South America",
    "benefits of meditation", "ways to learn to code", "famous poets", "vegetables rich in iron",
    "things to do in Paris", "ideas for a picnic", "questions to ask in an interview", "string instruments",
    "ways to be kind to others", "moons of Jupiter", "card games", "uses of JavaScript", "tips for writing an essay",
    "ways to manage time", "animals that live in the desert", "science fiction novels", "gardening tools",
    "reasons to learn history", "indoor activities", "sorting algorithms", "tips for a first date",
    "ways to save water", "famous architects", "tips for running a marathon", "hobbies for seniors",
    "reasons to travel", "ways to improve your vocabulary", "features of a good smartphone", "types of rocks",
    "famous landmarks in Europe", "ways to meet people in a new city", "foods rich in fiber", "tips for online safety",
    "benefits of cycling", "types of solar energy", "ways to boost creativity", "herbs used in Italian cooking",
    "tips for keeping a plant alive", "ways to organize a desk", "inventions of the 20th century",
    "tips for learning math", "ways to wind down before bed", "types of angles", "cognitive biases",
    "features of JavaScript", "useful Python libraries", "SQL commands for beginners", "nocturnal animals",
    "tips for moving to a new house", "winter activities for kids", "things to do at the beach",
    "qualities of a good teacher", "tips for making a video", "dishes from Japan", "lakes in North America",
    "famous volcanoes", "ancient wonders of the world", "famous dancers", "stretches for the back",
]
MORE_JSON_ENTITIES = [
    ("a bicycle", "brand, gears, price"), ("a concert", "artist, venue, date"), ("a vegetable", "name, color, calories"),
    ("a TV show", "title, seasons, network"), ("a doctor", "name, specialty, hospital"), ("a river", "name, length_km, continent"),
    ("a camera", "brand, megapixels, price"), ("a train", "number, departure, arrival"), ("a library", "name, city, books"),
    ("a board game", "name, players, minutes"), ("a house", "address, rooms, price"), ("a university", "name, country, students"),
    ("a shoe", "brand, size, color"), ("a cat", "name, breed, age"), ("an invoice", "number, customer, amount"),
    ("a ticket", "event, seat, price"), ("a playlist", "name, songs, duration"), ("a blog post", "title, author, tags"),
    ("a meeting", "title, time, attendees"), ("a coffee", "name, size, price"), ("a fruit", "name, color, season"),
    ("a server", "hostname, ip, os"), ("a holiday", "name, date, country"), ("a dinosaur", "name, period, length_m"),
]
MORE_WRITING = [
    "Write a short poem about the sun.", "Write a haiku about spring.", "Write a short story about a magic key.",
    "Write an email asking for a refund.", "Write a congratulations message for a new job.",
    "Write a product description for a desk lamp.", "Summarize the plot of The Three Little Pigs.",
    "Write a tweet announcing a charity run.", "Write a limerick about a frog.", "Write a short wedding toast.",
    "Describe a snowy village in three sentences.", "Write a short dialogue between a teacher and a student.",
    "Write a cover letter for a sales assistant position.", "Write a short review of a science museum.",
    "Write an email rescheduling a meeting.", "Write a poem about the city at night.", "Write a haiku about a river.",
    "Write a short story about a lonely lighthouse keeper.", "Write a welcome message for a new employee.",
    "Write a text message asking a neighbor to water my plants.", "Summarize the story of Little Red Riding Hood.",
    "Write a slogan for a gym.", "Write a short bio for a graphic designer.", "Write a recipe for a fruit salad.",
    "Describe a quiet beach in three sentences.", "Write a short fable about a fox and a crow.",
    "Write an email to a hotel asking about parking.", "Write a short poem about the wind.",
    "Write a motivational quote about patience.", "Write a job posting for a web developer.",
    "Write instructions for making a paper airplane.", "Write a short story about a talking cat.",
    "Write a thank-you note for a birthday gift.", "Summarize the plot of Alice in Wonderland.",
    "Write a joke about computers.", "Write a short announcement for a school bake sale.",
    "Write a letter to my future self.", "Write a short speech for a team celebration.",
    "Write a description of a dream vacation.", "Write a short blog post about morning routines.",
]
MORE_SNIPPETS = [
    "def average(xs):\n    return sum(xs) / len(x)\n",
    "def is_adult(age):\n    if age >= 18\n        return True\n    return False\n",
    "def count_words(text):\n    words = text.split()\n    counts = {}\n    for w in words:\n        counts[w] = counts.get(w, 0) + 1\n"
    "    return counts\n",
    "def max_value(d):\n    best = None\n    for k in d:\n        if best is None or d[k] > best:\n            best = d[k]\n"
    "    return best\n",
    "def celsius(f):\n    return (f - 32) * 5 / 9\n",
    "def reverse_list(xs):\n    out = []\n    for i in range(len(xs) - 1, -1, -1):\n        out.append(xs[i])\n    return out\n",
    "def has_digit(s):\n    for ch in s:\n        if ch.isdigit():\n            return True\n    return False\n",
    "def full_name(first, last):\n    return first + last\n",
]
MORE_PARAGRAPHS = [
    "Yesterday I goes to the market and buy some apples. The seller were very nice and he give me a discount "
    "because I buys a lot.",
    "The conference will take place on March 3, 2026. Registration closes on February 15, 2026, and the program "
    "will be published on January 20, 2026.",
    "Our neighbors has a big garden with many flowers. In the summer they invites everyone for a barbecue and the "
    "children plays until late.",
    "Thank you for your message. We have received your application and will review it carefully. You will hear "
    "from us within two weeks.",
    "The company was founded in March 2010. It opened its first store on July 4, 2012, and reached one million "
    "customers on December 1, 2019.",
    "He dont like to wake up early, but every day he have to catch the bus at seven. Last week he miss it twice.",
]


def _wave(prefix: str, rng: random.Random, earlier: list[list[str]]) -> list[str]:
    """One wave of new items (the lists named PREFIX_*): every family, every concept under every template, every list
    topic at 3 / 5 / 7, the grounded requests; less the held-out sets and the earlier pools, shuffled."""
    lists = {name: globals()[f"{prefix}_{name}"] for name in ("CONCEPTS", "SENTENCES", "LIST_THINGS", "JSON_ENTITIES",
                                                              "WRITING", "CODE_TASKS", "SNIPPETS", "PARAGRAPHS")}
    groups = _items(lists["CONCEPTS"], lists["SENTENCES"], lists["LIST_THINGS"], lists["JSON_ENTITIES"],
                    lists["WRITING"], lists["CODE_TASKS"], rng)
    groups["explain"] = [t.format(c) for c in lists["CONCEPTS"] for t in CONCEPT_TEMPLATES]
    groups["list"] = [f"List {n} {t}." for t in lists["LIST_THINGS"] for n in (3, 5, 7)]
    groups["grounded"] = _grounded(lists["SNIPPETS"], lists["PARAGRAPHS"])
    taken = set(heldout_chat_prompts()) | set(grounded_chat_prompts()) | {p for pool in earlier for p in pool}
    prompts = sorted({p for group in groups.values() for p in group} - taken)
    rng.shuffle(prompts)
    return prompts


def head_extra_prompts(seed: int = 0) -> list[str]:
    """The third wave of the head's pool (stage 7): the same request families over new items, none of them in
    `head_training_prompts()` nor in the held-out chat and grounded sets."""
    return _wave("MORE", random.Random(seed + 7), [head_training_prompts(seed)])


# The fourth wave (stage 8): the same request families again, over items in none of the pools above nor the held-out
# sets.
WAVE4_CODE_TASKS = [
    'returns the number of consonants in a string', 'computes the sum of the even numbers in a list',
    'converts a string to title case without using title()', 'counts the occurrences of a substring',
    'returns the absolute difference of two lists element-wise', 'computes the factorial of n recursively',
    'finds the smallest element of a list without using min',
    'computes the area of a triangle from its base and height', 'computes the volume of a sphere',
    'returns the distance between two points', 'checks whether a point is inside a circle',
    'returns the common prefix of a list of strings', 'counts the number of islands in a grid',
    'returns the transpose of a list of lists without zip', 'returns the cumulative sum of a list',
    'normalizes a list of numbers between 0 and 1', 'returns the top three most frequent words in a text',
    'removes empty strings from a list', 'splits a list into even and odd numbers',
    'returns every second element of a list', 'counts how many times each value appears in a list',
    'replaces every space in a string with an underscore', 'converts snake_case to camelCase',
    'converts camelCase to snake_case', 'returns the file extension of a path',
    'checks whether a URL starts with https', 'extracts the domain from an email address',
    'masks all but the last four digits of a card number', 'computes the tip for a restaurant bill',
    'converts seconds to hours, minutes and seconds', 'checks whether a date string is valid',
    'returns a list of dates for the next seven days', 'implements a linked list with insert and delete',
    'detects a cycle in a linked list', 'implements a min stack', 'implements a circular buffer',
    'implements a trie for words', 'implements radix sort', 'implements a binary search tree insert',
    'checks whether a binary tree is balanced', 'finds the lowest common ancestor in a binary tree',
    'computes the number of paths in a grid', 'solves the coin change problem',
    'computes the longest common subsequence', 'computes the longest increasing subsequence',
    'solves the 0/1 knapsack problem', 'solves the Tower of Hanoi', 'generates all subsets of a list',
    'generates all valid combinations of n pairs of parentheses', 'returns the sum of the proper divisors of n',
    'checks whether a number is a perfect number', 'computes the digital root of a number',
    'computes the Collatz sequence of a number', "computes the square root of a number with Newton's method",
    'estimates pi with random points', 'converts binary to decimal', 'swaps two variables without a temporary variable',
    'returns the maximum of three numbers', 'checks whether a character is a letter or a digit',
    'reads a JSON file and returns a dictionary', 'writes a list of dictionaries to a CSV file',
    'counts the words in a file', 'finds the longest line in a file', 'downloads a web page and returns its title',
    'retries a function call up to three times', 'caches the results of a function',
    'implements a simple counter class', 'implements a stopwatch class', 'implements a shopping cart class',
    'implements a class for a point in 2D', 'implements a class for a fraction', 'implements a simple event emitter',
    'validates a postal code', 'generates a random hex color', 'shuffles a list without using random.shuffle',
    'picks a random element from a list with weights', 'checks whether a number is a multiple of three and five',
    'returns the sum of a list without using sum', 'removes the whitespace at both ends of every string in a list',
    'checks whether two rectangles overlap', 'returns the nth triangular number',
    'computes the harmonic mean of a list', 'finds the first repeated element of a list',
    'checks whether a string is a pangram',
    'counts the number of paragraphs in a text', 'returns the longest common suffix of two strings',
    'computes the running average of a stream of numbers', 'splits a string into chunks of n characters',
    'checks whether a list is a palindrome', 'finds the peak element of a list',
    'returns the indexes of all occurrences of a value', 'computes the sum of the first n odd numbers',
    'converts a string of digits to an integer without int()',
    'returns the missing letters of the alphabet in a string', 'checks whether a number is a happy number',
    'computes the number of trailing zeros of n factorial', 'implements a deque with a list',
    'implements a simple key-value store class', 'implements a matrix class with addition',
    'checks whether a word can be built from a set of letters', 'returns a histogram of a list as stars',
    'implements a rate limiter class', 'parses a query string into a dictionary',
    'builds a URL from a base and parameters',
]
WAVE4_CONCEPTS = [
    'atoms', 'molecules', 'inertia', 'momentum', 'kinetic energy', 'electric current', 'a battery', 'a generator',
    'wind power', 'hydroelectric power', 'air pollution', 'recycling', 'composting', 'extinction', 'fossils',
    'photosynthesis in algae', 'the nervous system', 'dreams', 'the five senses', 'the common cold', 'a fever', 'sugar',
    'caffeine', 'the kidneys', 'the liver', 'the eye', 'the ear', 'a galaxy', 'a star', 'an asteroid',
    'latitude and longitude', 'a map', 'a compass', 'a barometer', 'a thermometer', 'a hurricane', 'a tornado',
    'a tsunami', 'droughts', 'the Sahara', 'mountains', 'rivers', 'an island', 'a peninsula', 'the pyramids',
    'the Great Wall of China', 'the Olympic Games', 'saving money', 'investing', 'stocks and bonds', 'a credit score',
    'advertising', 'a brand', 'customer service', 'e-commerce', 'supply chains', 'a data structure', 'a computer virus',
    'malware', 'a VPN', 'Bluetooth', '5G', 'a pixel', 'RAM', 'a hard drive', 'a file system',
    'functional programming', 'a recursive function', 'sorting', 'a queue', 'a stack', 'a graph in computer science',
    'a binary tree', 'JSON', 'HTML', 'CSS', 'SQL', 'Git branches', 'containers', 'machine translation',
    'speech recognition', 'computer vision', 'a large language model', 'overfitting', 'gradient descent', 'an average',
    'percentages', 'negative numbers', 'a triangle', 'a circle', 'symmetry', 'music theory', 'rhythm', 'poetry',
    'a novel', 'theater', 'photography', 'painting', 'architecture', 'friendship', 'kindness', 'honesty', 'curiosity',
    'the spinal cord', 'the skeleton', 'red blood cells', 'a cell membrane', 'chromosomes', 'mutation',
    'natural selection', 'adaptation', 'camouflage', 'hibernation', 'a habitat', 'a wetland', 'a savanna', 'the tundra',
    'the ocean floor', 'ocean currents', 'a monsoon', 'lightning', 'thunder', 'snow', 'fog', 'a dam', 'irrigation',
    'farming', 'bees', 'ants', 'photosynthesis and respiration', 'a lever', 'a pulley', 'buoyancy', 'air pressure',
    'density', 'evaporation', 'condensation', 'melting and freezing', 'a solution in chemistry', 'rust',
    'the metric system', 'a light-year', 'a black dwarf', 'a nebula', 'the ancient Olympics',
    'the Aztecs', 'the Incas', 'the Ottoman Empire', 'the American Revolution',
    'the telephone', 'the steam engine', 'the light bulb', 'radio', 'television', 'a refrigerator', 'a microwave oven',
    'an electric car', 'a solar panel', 'a wind turbine',
]
WAVE4_SENTENCES = [
    'I am going to the library.', 'The train is late again.', 'My mother makes the best soup.', 'Can I pay by card?',
    'We had dinner at a nice restaurant.', 'The students are studying for the exam.', 'Where can I buy a ticket?',
    'My phone battery is empty.', 'I have two brothers and one sister.', 'This soup is delicious.',
    'He is waiting for the bus.', 'I usually wake up at seven.', 'The road is closed because of the snow.',
    'Do you want to come with us?', 'I am tired after the long trip.', 'Our teacher gave us a lot of homework.',
    'The airport is far from here.', 'How do I get to the museum?', 'The price includes breakfast.',
    'She is a very good singer.', 'I will call you later.', 'The kitchen is very clean.',
    'They are moving to a new apartment.', 'I want to learn how to swim.', 'The market opens early in the morning.',
    'The book is on the table.', 'We are lost, can you help us?', 'The children are drawing pictures.',
    'I prefer tea to coffee.', 'The shop closes at six.', 'My grandmother lives in the countryside.',
    'Is this seat free?', 'I am learning to play the guitar.', 'The sun sets early in winter.',
    'The bakery sells warm bread every morning.', 'I am going to visit my aunt next week.',
    'The weather will be cold tomorrow.', 'Our flight was cancelled.', 'I need a new pair of shoes.',
    'The teacher is explaining the lesson.', 'We are cooking dinner together.', 'This street is very quiet at night.',
    'My friend is coming to visit on Friday.', 'The bus stop is in front of the bank.', 'I have a headache.',
    'The lake is frozen in winter.', 'Thank you for the delicious meal.',
]
WAVE4_LIST_THINGS = [
    'ways to stay hydrated', 'countries in Africa', 'benefits of reading', 'ways to reduce waste',
    'famous mathematicians', 'foods rich in protein', 'ideas for a school project', 'questions to ask a doctor',
    'wind instruments', 'ways to make friends', 'planets with rings', 'outdoor games for children',
    'uses of machine learning', 'fantasy novels', 'camping essentials',
    'reasons to learn a second language', 'graph algorithms', 'ways to improve your handwriting',
    'tips for a healthy heart', 'hobbies for teenagers', 'reasons to adopt a pet', 'ways to improve your memory',
    'foods rich in calcium', 'tips for protecting your privacy', 'benefits of swimming',
    'ways to spark curiosity in kids', 'spices used in Indian cooking', 'tips for growing tomatoes',
    'ways to keep a clean kitchen', 'tips for studying history', 'ways to start the morning well', 'logical fallacies',
    'useful JavaScript libraries', 'Git commands for beginners', 'animals that hibernate',
    'summer activities for families', 'things to bring to the beach', 'tips for taking good photos',
    'dishes from Italy', 'famous bridges', 'deserts of the world', 'famous athletes', 'exercises for beginners',
    'ways to practice gratitude', 'healthy snacks for work', 'tips for writing a resume', 'symptoms of dehydration',
    'tips for driving safely', 'ways to recycle at home', 'data types in Python', 'HTTP status codes',
    'Linux commands for beginners', 'famous physicists', 'mammals that live in the sea', 'tips for a long flight',
    'ways to celebrate a birthday at home', "tips for a good night's sleep before an exam", 'famous sculptors',
    'board games for two players', 'ways to learn a new skill quickly', 'famous explorers',
    'birds that live near water', 'tips for staying safe online', 'tips for cooking rice', 'careers in science',
    'ways to save time in the morning', 'famous women in science', 'features of a good password', 'types of bread',
    'mountains in Europe', 'ways to help the environment', 'tips for learning to draw', 'fruits that grow on trees',
    'vegetables that are green', 'tips for a long car trip', 'ways to cool down in summer',
    'ways to stay warm in winter',
]
WAVE4_JSON_ENTITIES = [
    ('a museum', 'name, city, opening_hours'), ('a phone', 'brand, model, storage_gb'), ('a dog', 'name, breed, age'),
    ('a teacher', 'name, subject, school'), ('a watch', 'brand, material, price'),
    ('a video game', 'title, platform, year'),
    ('an apartment', 'city, rooms, rent'), ('a jacket', 'brand, size, color'), ('a bird', 'name, wingspan_cm, habitat'),
    ('an order', 'id, customer, total'), ('a user account', 'username, email, created_at'),
    ('a newspaper article', 'headline, author, date'), ('a workout', 'name, duration_min, calories'),
    ('a tea', 'name, origin, caffeine'), ('a database table', 'name, columns, rows'),
    ('a festival', 'name, city, month'), ('an insect', 'name, legs, habitat'), ('a pizza', 'name, toppings, price'),
    ('a sensor', 'id, type, reading'), ('a hospital', 'name, city, beds'), ('a pet shop', 'name, city, animals'),
    ('a song album', 'title, artist, tracks'), ('a lake', 'name, area_km2, country'),
    ('a tablet', 'brand, screen_inches, price'), ('a marathon', 'city, date, distance_km'),
    ('a chef', 'name, restaurant, specialty'), ('a parking lot', 'name, spaces, price_per_hour'),
]
WAVE4_WRITING = [
    'Write an email asking a colleague for help with a report.', 'Write a congratulations message for a graduation.',
    'Write a product description for a backpack.', 'Summarize the plot of Hansel and Gretel.',
    'Write a tweet announcing a book club.', 'Write a short toast for a birthday.',
    'Describe a busy market in three sentences.', 'Write a short dialogue between a doctor and a patient.',
    'Write a cover letter for a barista position.', 'Write an email cancelling a subscription.',
    'Write a short story about a girl who finds a dragon egg.', 'Write a welcome message for a new club member.',
    'Write a text message inviting friends to a movie night.', 'Summarize the story of the Tortoise and the Hare.',
    'Describe a forest in autumn in three sentences.', 'Write a short fable about an ant and a grasshopper.',
    'Write a motivational quote about hard work.', 'Write a job posting for a data analyst.',
    'Write a thank-you note to a neighbor.', 'Summarize the plot of The Jungle Book.', 'Write a joke about cats.',
    'Write a short announcement for a library reading event.', 'Write a letter to a pen pal.',
    'Write a short speech for a school graduation.', 'Write a description of a perfect weekend.',
    'Write a short blog post about learning to cook.', 'Write an apology email for a late delivery.',
    'Write a short poem about a cup of coffee.',
    'Write a packing list message for a school trip.', 'Write a short review of a new smartphone.',
    'Write a riddle about time.', 'Write a short invitation to a garden party.',
    'Write a short note to remind the team about a deadline.', 'Describe a city street at night in three sentences.',
    'Write a short poem about the snow.', 'Write a haiku about the moon.', 'Write a short story about a clever rabbit.',
    'Write a limerick about a fish.', 'Write a short review of a coffee shop.', 'Write a poem about a school day.',
    'Write a haiku about a garden.', 'Write a slogan for a bookshop.', 'Write a short bio for a music teacher.',
    'Write a recipe for tomato soup.', 'Write an email to a teacher about a missed class.',
    'Write a short poem about the sky.', 'Write instructions for making a cup of tea.',
    'Write a short story about a lost balloon.', 'Summarize the story of Goldilocks and the Three Bears.',
]
WAVE4_SNIPPETS = [
    "def greet(name):\n    print('Hello, ' + name\n",
    "def last_element(xs):\n    return xs[len(xs)]\n",
    "def count_positive(nums):\n    count = 0\n    for n in nums:\n        if n > 0:\n            count += 1\n    return count\n",
    "def squares(n):\n    result = []\n    for i in range(n):\n        result.append(i * i)\n    return result\n",
    "def is_prime(n):\n    for i in range(2, n):\n        if n % i == 0:\n            return False\n    return True\n",
    "def merge(a, b):\n    out = {}\n    for k in a:\n        out[k] = a[k]\n    for k in b:\n        out[k] = b[k]\n    return out\n",
    "def find_index(xs, target):\n    for i in range(len(xs)):\n        if xs[i] == target:\n            return i\n    return -1\n",
    "def word_lengths(text):\n    lengths = []\n    for w in text.split():\n        lengths.append(len(w))\n    return lengths\n",
    "def minimum(a, b):\n    if a < b:\n        return b\n    return a\n",
]
WAVE4_PARAGRAPHS = [
    "The library will be closed from April 2 to April 6, 2026. Books can be returned on April 7, and the new reading "
    "room opens on May 1, 2026.",
    "My teacher say that I needs to practice more. She give us a test every friday and I always forgets to study.",
    "Dear customer, your order has been shipped today. It should arrive within three to five working days. Thank you "
    "for shopping with us.",
    "The bridge was built in 1932. It was repaired on June 10, 1988, and it was closed to cars on September 1, 2015.",
    "We was very happy when our team win the match. Everybody were singing and the coach buyed pizza for all of us.",
    "The new park has a playground, a small lake and a cafe. It is open every day from eight in the morning until "
    "nine in the evening.",
    "She have worked in this company since five years. Now she want to change job because she dont like her boss.",
]


def head_wave4_prompts(seed: int = 0) -> list[str]:
    """The fourth wave of the head's pool (stage 8): the same request families over new items, none of them in
    `head_training_prompts()`, `head_extra_prompts()` nor the held-out chat and grounded sets."""
    return _wave("WAVE4", random.Random(seed + 8), [head_training_prompts(seed), head_extra_prompts(seed)])


# The fifth wave (stage 8 too): the same families over items in none of the lists above.
WAVE5_CODE_TASKS = [
    'returns the number of words in a string that end with a vowel', 'checks whether a list is strictly increasing',
    'returns the product of the digits of a number', 'computes the sum of a geometric series',
    'returns the element that appears more than half the time in a list', 'converts a list of seconds to minutes',
    'returns the sum of the numbers between two integers',
    'finds all pairs of numbers in a list with a given difference', 'checks whether a number is a Fibonacci number',
    'returns the nth digit of pi from a string', 'converts an RGB color to a hex string', 'converts a hex color to RGB',
    'returns the shortest word of a sentence',
    'removes the first and last character of a string', 'checks whether a string ends with a question mark',
    'doubles every element of a list', 'filters the words longer than n characters',
    'checks whether a number is negative', 'returns the sign of a number',
    'clamps a number between a minimum and a maximum', 'rounds a number to the nearest ten',
    'computes the factorial of every number in a list', 'returns the largest even number in a list',
    'returns the positions of the vowels in a string', 'reverses the order of the lines in a text',
    'counts the number of unique words in a text', 'checks whether two words rhyme by their last two letters',
    'returns the alphabetical position of each letter', 'encodes a string with a Caesar cipher',
    'decodes a Caesar cipher', 'counts how many numbers in a list are prime', "returns the sum of a matrix's rows",
    'returns the maximum of each column of a matrix', 'flattens a dictionary of dictionaries',
    'merges a list of dictionaries', 'sorts a dictionary by its values',
    'returns the keys of a dictionary with the largest value', 'removes the keys with empty values from a dictionary',
    'counts the elements of a list greater than the average', 'returns the differences between consecutive elements',
    'checks whether a list has two adjacent equal elements', 'finds the longest run of equal elements in a list',
    'splits a number into its integer and fractional parts', 'converts a percentage string to a float',
    'parses a time string like 14:30 into minutes', 'adds n days to a date',
    'returns the quarter of the year for a date', 'checks whether a year is a century year',
    'computes the age in days from a birth date', 'implements a tic-tac-toe winner check',
    'implements a simple calculator with four operations', 'implements a guessing game with random numbers',
    'implements rock paper scissors', 'draws a triangle of stars', 'prints a multiplication table',
    'prints the numbers from 1 to 100 with FizzBuzz', 'converts grams to pounds',
    'computes the speed from distance and time', 'computes the monthly payment of a loan',
    'computes the discount price', 'implements a class for a library book',
    'implements a class for a student with grades', 'implements a class for a bank with several accounts',
    'implements a queue class with a size limit', 'implements an inventory class for a store',
    'implements a class for a car with a fuel level', 'validates a username with rules',
    'checks whether a credit card number passes the Luhn check', 'generates a random string of letters and digits',
    'removes HTML tags from a string', 'escapes HTML special characters', 'counts the words in an HTML string',
    'finds all the links in an HTML string', 'converts a list to an HTML list', 'converts a CSV line into a list',
    'reads a text file and prints it in reverse', 'appends a line to a file', 'returns the size of a file in kilobytes',
    'lists the files in a folder with a given extension', 'computes the checksum of a file',
    'sorts the lines of a file', 'finds the duplicates in a list of file names',
    'computes the Manhattan distance between two points', 'computes the cosine similarity of two vectors',
    'normalizes a vector', 'computes the cross product of two 3D vectors', 'computes the mean of each row of a matrix',
    'generates the first n even numbers', 'returns the numbers in a range divisible by 7',
    'returns the number of times a digit appears in a number', 'checks whether two numbers have the same digits',
    'finds the largest prime factor of a number', 'computes the sum of the primes below n',
]
WAVE5_CONCEPTS = [
    'fungi', 'plants', 'seeds', 'roots', 'leaves', 'flowers', 'trees', 'insects', 'mammals', 'reptiles', 'amphibians',
    'birds', 'fish', 'whales', 'sharks', 'dolphins', 'elephants', 'soil', 'minerals', 'crystals', 'diamonds', 'gold',
    'iron', 'steel', 'plastic', 'glass', 'paper', 'cotton', 'silk', 'wool', 'rubber', 'oil', 'natural gas', 'coal',
    'electric motors', 'engines', 'airplanes', 'helicopters', 'submarines', 'trains', 'bicycles', 'bridges',
    'skyscrapers', 'tunnels', 'roads', 'traffic lights', 'cities', 'villages', 'farms', 'factories', 'hospitals',
    'schools', 'libraries', 'museums', 'parks', 'zoos', 'money', 'coins', 'credit cards', 'cryptocurrency',
    'a stock exchange', 'a salary', 'a pension', 'a tax return', 'a contract', 'a patent', 'copyright', 'a trademark',
    'a court', 'a jury', 'a lawyer', 'a parliament', 'a president', 'a king', 'an empire', 'a colony', 'a revolution',
    'a treaty', 'a census', 'a map projection', 'an atlas', 'a calendar', 'a clock', 'a leap year',
    'a time machine in fiction', 'science fiction', 'mythology', 'Greek gods', 'fairy tales', 'comics', 'animation',
    'video games', 'chess', 'soccer', 'basketball', 'tennis', 'swimming', 'yoga', 'running', 'a marathon',
    'a healthy breakfast', 'cooking', 'baking', 'fermentation', 'cheese', 'chocolate', 'coffee', 'tea', 'rice', 'bread',
    'spices', 'salt', 'water purification', 'plumbing', 'electric wiring', 'a light switch', 'a thermostat',
    'an air conditioner', 'a heat pump', 'insulation', 'drones', 'the Internet of Things', 'smart homes', 'a QR code',
    'a barcode', 'a password', 'a username', 'an email address', 'spam', 'cookies on websites', 'a web server',
    'a domain name', 'a URL', 'a programming library', 'a framework', 'a software update', 'a backup',
    'a spreadsheet formula', 'a pie chart', 'a bar chart', 'a histogram', 'the median', 'the mode',
    'a standard deviation', 'a correlation', 'a hypothesis', 'an experiment', 'a theory', 'a law of physics',
    "Newton's laws", 'energy conservation', "a magnet's poles", 'an electromagnet', 'ultraviolet light',
    'infrared light', 'X-rays', 'radioactivity',
]
WAVE5_SENTENCES = [
    'I am reading a very interesting book.', 'The train leaves from platform three.',
    'We are having a picnic in the park.', 'Could you open the door, please?', 'My cousin lives in another country.',
    'The soup needs more salt.', 'I have an appointment with the dentist.', 'The children are swimming in the lake.',
    'It is very hot today.', 'I would like a glass of water.', 'The library has many old books.',
    'We took a lot of photos.', 'My neighbor has a big dog.', 'The concert starts at nine.',
    'I am looking for a new job.', 'The city is beautiful in spring.', 'Please write your name here.',
    'The store is out of milk.', 'I will be back in ten minutes.', 'Where is the nearest pharmacy?',
    'The movie was very funny.', 'He plays the piano every evening.', 'We need to leave early tomorrow.',
    'The cake is in the oven.', 'Our team won the game.', "I can't find my glasses.",
    'The hotel room has a beautiful view.', 'She works as a nurse.', 'The bus is full today.',
    'I am sorry for the mistake.', "Let's go for a walk.", 'The garden is full of roses.',
    'My brother is taller than me.', 'We are going on vacation in August.', 'The painting is very old.',
    'Please speak louder.', 'The museum opens at ten.', 'I like to cook on weekends.', 'The baby is smiling.',
    'It is too late to call him.', 'The streets are wet after the rain.', 'I need help with my homework.',
    'Turn left at the next corner.', 'The restaurant is fully booked.', 'My keys are in my bag.',
    'We met at the university.', 'The price is too high.', 'Good luck with your exam!',
]
WAVE5_LIST_THINGS = [
    'tips for a healthy lunch', 'ways to practice mindfulness', 'famous novelists', 'countries in Asia',
    'benefits of learning music', 'ways to reduce plastic use', 'famous philosophers', 'foods rich in vitamin D',
    'things to do in London', 'ideas for a family game night', 'questions to ask a new teacher',
    'percussion instruments', 'ways to help a friend', 'moons in the solar system', 'puzzle games', 'uses of SQL',
    'tips for taking notes', 'ways to avoid procrastination', 'animals that live in the Arctic', 'mystery novels',
    'office supplies', 'reasons to learn science', 'water sports', 'search algorithms', 'tips for keeping a house cool',
    'famous film directors', 'tips for healthy skin', 'hobbies for adults', 'reasons to visit a museum',
    'features of a good laptop', 'types of forests',
    'famous landmarks in America', 'ways to have fun without money', 'foods rich in potassium',
    'tips for strong passwords', 'benefits of walking', 'types of batteries', 'ways to encourage reading',
    'spices used in Mexican cooking', 'tips for growing herbs indoors', 'ways to organize a closet',
    'inventions of ancient Rome', 'tips for learning physics', 'ways to end the day calmly', 'types of quadrilaterals',
    'memory techniques', 'features of Java', 'useful command line tools', 'CSS properties for beginners',
    'animals that live in trees', 'tips for moving abroad', 'spring activities for kids',
    'things to see in a city park', 'qualities of a good friend', 'tips for recording a podcast', 'dishes from Mexico',
    'islands in the Pacific', 'famous castles', 'oceans of the world', 'famous chess players', 'exercises for the arms',
    'ways to show appreciation', 'healthy drinks', 'tips for a video call', 'ways to learn new words',
    'popular cat breeds', 'types of cheese', 'signs of a cold', 'tips for cycling in the city',
    'ways to reuse glass jars', 'loops in Python', 'common Git mistakes', 'keyboard shortcuts', 'famous chemists',
    'animals with shells', 'tips for a train journey', 'ways to celebrate a new year',
]
WAVE5_JSON_ENTITIES = [
    ('a zoo animal', 'name, species, age'), ('a smartwatch', 'brand, battery_days, price'),
    ('a parrot', 'name, color, words'), ('a radio station', 'name, frequency, genre'), ('a nurse', 'name, ward, shift'),
    ('a volcano', 'name, height_m, active'), ('a ring', 'material, size, price'), ('a ferry', 'name, route, capacity'),
    ('a lesson', 'subject, teacher, room'), ('a mobile app', 'name, category, downloads'),
    ('a cottage', 'location, bedrooms, price_per_night'), ('a startup', 'name, founded, funding'),
    ('a pair of jeans', 'brand, waist, length'), ('a fish', 'name, water, length_cm'),
    ('a delivery', 'id, address, status'), ('a login attempt', 'username, time, success'),
    ('a statue', 'name, sculptor, city'), ('a press release', 'title, company, date'),
    ('a running route', 'name, distance_km, elevation_m'), ('a juice', 'name, fruits, price'),
    ('a region', 'name, country, area_km2'), ('a log entry', 'level, time, message'), ('a parade', 'name, city, date'),
    ('a spider', 'name, legs, venomous'), ('a sandwich', 'name, bread, price'), ('a robot', 'model, sensors, battery'),
    ('a clinic', 'name, doctors, address'), ('a credit card', 'holder, limit, expires'),
]
WAVE5_WRITING = [
    'Write a short poem about the forest.', 'Write a haiku about summer.', 'Write a short story about a kind giant.',
    'Write an email asking for a meeting with a professor.', 'Write a congratulations message for a new baby.',
    'Write a product description for a coffee mug.', 'Summarize the plot of Peter Pan.',
    'Write a tweet announcing a photography contest.', 'Write a limerick about a bird.',
    'Write a short toast for a retirement party.', 'Describe a train station in three sentences.',
    'Write a cover letter for a receptionist position.', 'Write a short review of a hiking trail.',
    'Write an email asking a neighbor to keep the noise down.', 'Write a poem about an old house.',
    'Write a haiku about a cat.', 'Write a short story about a boy who can talk to birds.',
    'Write a welcome message for a website.', 'Write a text message wishing a friend good luck.',
    'Summarize the story of Pinocchio.', 'Write a slogan for a bike shop.', 'Write a short bio for a chef.',
    'Write a recipe for a simple salad.', 'Describe a snowy mountain in three sentences.',
    'Write a short fable about a lion and a mouse.', 'Write an email to a company asking about an internship.',
    'Write a short poem about the ocean waves.', 'Write a job posting for a nurse.',
    'Write instructions for tying a tie.', 'Write a short story about a secret door.',
    'Write a thank-you note to a coach.', 'Summarize the plot of Treasure Island.', 'Write a joke about teachers.',
    'Write a short announcement for a town cleanup day.', 'Write a letter to a favorite author.',
    "Write a short speech for a friend's wedding.", 'Write a description of a cozy cafe.',
    'Write a short blog post about saving money.', 'Write an apology message for missing a party.',
    'Write a short poem about the autumn leaves.', 'Write a short story about a dog who becomes a hero.',
    "Write a reminder message for a doctor's appointment.", 'Write a short review of a bookstore.',
    'Summarize the story of The Ugly Duckling.', 'Write a riddle about the moon.',
    'Write a short invitation to a housewarming party.', 'Write a short note to thank the team for their work.',
    'Describe a farm in the morning in three sentences.',
]
WAVE5_SNIPPETS = [
    'def add_all(nums):\n    result = 0\n    for n in nums\n        result += n\n    return result\n',
    "def first_word(s):\n    return s.split(' ')[1]\n", 'def percent(part, whole):\n    return part / whole * 100\n',
    'def evens(nums):\n    out = []\n    for n in nums:\n        if n % 2 == 0:\n            out.append(n)\n    return out\n',
    "def greet_all(names):\n    for name in names:\n        print('Hi ' + name)\n",
    'def fact(n):\n    if n == 0:\n        return 0\n    return n * fact(n - 1)\n',
    'def to_upper(words):\n    result = []\n    for w in words:\n        result.append(w.upper())\n    return result\n',
    'def contains(xs, v):\n    for x in xs:\n        if x = v:\n            return True\n    return False\n',
    'def avg_len(words):\n    return sum(len(w) for w in words) / len(words)\n',
]
WAVE5_PARAGRAPHS = [
    'The museum opened on May 18, 1995. It was renovated in October 2010 and welcomed its ten millionth visitor on August 2, 2023.',
    'I has a cat named Leo. He like to sleep on my bed and he always wake me up at five in the morning.',
    'Please note that the office will be closed next Monday for a public holiday. Urgent requests can be sent to the support email, which is checked once a day.',
    'The first train ran on this line on April 1, 1901. The line was electrified in 1958 and extended to the airport on November 20, 2019.',
    'Their house are very big and it have a swimming pool. When we visits them, we swims all day.',
    'The workshop teaches basic cooking skills. Participants learn to cut vegetables, cook pasta and prepare a simple sauce in two hours.',
    'My boss dont answer my emails since two weeks. I thinks he are very busy with the new project.',
]


def head_wave5_prompts(seed: int = 0) -> list[str]:
    """The fifth wave of the head's pool (stage 8): the same request families over new items, in no earlier pool
    (`head_training_prompts()`, `head_extra_prompts()`, `head_wave4_prompts()`) nor the held-out sets."""
    return _wave("WAVE5", random.Random(seed + 9), [head_training_prompts(seed), head_extra_prompts(seed),
                                                     head_wave4_prompts(seed)])


# Other phrasings (stage 10): the earlier pools' concepts under request templates none of the pools used, and writing
# requests about them; users ask in more ways than the four CONCEPT_TEMPLATES.
REPHRASE_TEMPLATES = ["Describe {} in a few sentences.", "Tell me about {}.", "How would you explain {} to a friend?",
                      "What are the most important facts about {}?"]
REPHRASE_WRITING_TEMPLATES = ["Write a short poem about {}.", "Write a short story about {}.",
                              "Write a short blog post about {}.", "Write a haiku about {}."]


def head_rephrase_prompts(seed: int = 0) -> list[str]:
    """Every earlier pool's concepts (CONCEPTS, WIDE_, MORE_, WAVE4_, WAVE5_) under two of REPHRASE_TEMPLATES and one
    of REPHRASE_WRITING_TEMPLATES, drawn per concept; in no earlier pool nor the held-out sets."""
    rng = random.Random(seed + 10)
    concepts = CONCEPTS + WIDE_CONCEPTS + MORE_CONCEPTS + WAVE4_CONCEPTS + WAVE5_CONCEPTS
    prompts = {t.format(c) for c in concepts for t in rng.sample(REPHRASE_TEMPLATES, 2)}
    prompts |= {rng.choice(REPHRASE_WRITING_TEMPLATES).format(c) for c in concepts}
    taken = set(heldout_chat_prompts()) | set(grounded_chat_prompts())
    taken |= {p for pool in (head_training_prompts(seed), head_extra_prompts(seed), head_wave4_prompts(seed),
                             head_wave5_prompts(seed)) for p in pool}
    prompts = sorted(prompts - taken)
    rng.shuffle(prompts)
    return prompts


# The sixth wave (stage 10): the same families over items in none of the lists above.
WAVE6_CODE_TASKS = [
    'checks whether a string contains any whitespace', 'returns the middle character of a string',
    'returns the words of a sentence in reverse alphabetical order', 'checks whether a list contains only strings',
    'returns the average of the odd numbers in a list', 'computes the cube of every number in a list',
    'returns the numbers in a list that are greater than a threshold',
    'converts a number of days into weeks and days', 'converts liters to gallons', 'converts inches to centimeters',
    'computes the volume of a cylinder', 'computes the circumference of a circle',
    'computes the hypotenuse of a right triangle', 'computes the slope of a line through two points',
    'computes the midpoint of two points', 'solves a quadratic equation',
    'computes the final grade from a list of weighted scores', 'converts a score out of 100 to a letter grade',
    'computes the sales tax on a price', 'splits a bill evenly among friends',
    'computes the total cost of the items in a shopping list', 'computes the number of minutes between two times',
    'returns the name of the month for a month number', 'checks whether a date falls on a weekend',
    'formats a date as day/month/year', 'counts the number of Mondays in a year',
    'returns the season for a given month', 'computes the number of weeks until a date',
    'checks whether a string is a valid hexadecimal number',
    'checks whether a string is a valid time in HH:MM format', 'extracts the hashtags from a tweet',
    'extracts all the email addresses from a text', 'counts the number of questions in a text',
    'returns the longest sentence of a paragraph', 'capitalizes the first letter of every sentence',
    'wraps a text into lines of at most n characters', 'centers a string in a field of a given width',
    'removes the digits from a string', 'replaces multiple spaces with a single space',
    'returns the acronym of a phrase', 'checks whether a word is an isogram',
    'sorts the characters of a string alphabetically', 'returns the words that appear in both of two sentences',
    'censors a list of banned words in a text', 'converts a string to alternating uppercase and lowercase letters',
    'reverses every word in a sentence but keeps their order',
    'checks whether a list of numbers forms an arithmetic sequence', 'returns the second smallest number in a list',
    'finds the index of the smallest element of a list', 'removes every nth element from a list',
    'pairs each element of a list with its index', 'splits a list at every occurrence of a given value',
    'returns the elements of a list that are not in another list', 'counts the negative numbers in a list',
    'replaces the negative numbers in a list with zero', 'creates an identity matrix of size n',
    'returns the border elements of a matrix', 'returns the elements of a matrix in spiral order',
    'multiplies every element of a matrix by a number', 'maps each word of a sentence to its length in a dictionary',
    'returns the keys that two dictionaries have in common', 'renames a key in a dictionary',
    'groups a list of numbers by their remainder modulo 3',
    'finds the student with the highest grade in a dictionary', 'implements a class for a thermostat',
    'implements a class for a music playlist', 'implements a class for a parking garage',
    'implements a class for a library member who can borrow books', 'implements a countdown timer class',
    'implements a class for a circle with area and perimeter', 'implements a class for a deck of cards',
    'implements a simple voting system', 'checks a guessed letter in a game of hangman',
    'implements a dice game for two players', 'implements a simple text-based menu',
    'implements a quiz that asks three questions', 'implements binary search on a sorted list of strings',
    'implements shell sort', 'implements a hash map with separate chaining', 'implements a doubly linked list',
    'returns the middle node of a linked list', 'counts the leaves of a binary tree',
    'checks whether two binary trees are identical', 'computes the number of ways to climb n stairs',
    'computes the maximum profit from a single stock trade', 'reverses the digits of an integer',
    'computes the sum of the cubes of the digits of a number',
    'returns the largest number that can be formed from a list of digits',
    'computes the n-th term of an arithmetic sequence', 'computes the percentage change between two numbers',
    'counts the blank lines in a text file', 'reads a file and returns its lines without newline characters',
    'adds a prefix to the names of all files in a folder', 'finds the largest file in a folder',
    'deletes the empty lines of a file', 'writes a dictionary to a JSON file',
    'converts a CSV file to a list of dictionaries', 'returns the column names of a CSV file',
    'computes the average of a column in a CSV file', 'validates a hex color code',
    'checks whether a string is a valid Python identifier', 'generates a random six-digit code',
    'generates a list of n random numbers between 1 and 100', 'adds an ordinal suffix like 1st or 2nd to a number',
    'converts a number of bytes to a human-readable size', 'evaluates a postfix expression',
    'extracts the year from a date string', 'implements a decorator that prints the arguments of a function',
    'implements a generator that yields the Fibonacci numbers', 'implements a context manager that measures time',
]
WAVE6_CONCEPTS = [
    'mushrooms', 'cacti', 'bamboo', 'algae', 'jellyfish', 'octopuses', 'penguins', 'owls', 'bats', 'wolves', 'frogs',
    'butterflies', 'camels', 'kangaroos', 'dinosaurs', 'metamorphosis', 'a food web', 'predators and prey',
    'symbiosis', 'parasites', 'seed dispersal', 'germination', 'chlorophyll', 'the stomach', 'hiccups', 'yawning',
    'sneezing', 'goosebumps', 'blood types', 'the pulse', 'blood pressure', 'cholesterol', 'carbohydrates', 'sunburn',
    'sunscreen', 'first aid', 'clinical trials', 'anesthesia', 'an MRI scan', 'a stethoscope', 'eyeglasses',
    'hearing aids', 'echoes', 'vibrations', 'reflection of light', 'refraction', 'a prism', 'shadows',
    'surface tension', 'centripetal force', 'acceleration', 'velocity', 'voltage', 'electrical resistance',
    'a circuit breaker', 'conductors and insulators', 'isotopes', 'half-life', 'combustion', 'a catalyst',
    'the pH scale', 'alloys', 'polymers', "the Earth's core", 'geysers', 'caves', 'canyons', 'a river delta',
    'waterfalls', 'sand dunes', 'the equator', 'the northern lights', 'meteors', 'sunspots', 'Jupiter',
    "Saturn's rings", 'Venus', 'an orbit', 'a space probe', 'astronauts', 'exoplanets', 'a constellation',
    'a supernova', 'day and night', 'a touchscreen', 'a printer', 'a router', 'fiber optic cables', 'a USB port',
    'a motherboard', 'an SSD', 'a text editor', 'a syntax error', 'an exception in programming',
    'a floating-point number', 'a module in Python', 'a package manager', 'a virtual environment', 'a terminal',
    'a shell script', 'regular expressions', 'a REST API', 'a load balancer', 'latency', 'bandwidth', 'a primary key',
    'a SQL join', 'public-key cryptography', 'a pull request', 'code review', 'continuous integration',
    'a merge conflict', 'pseudocode', 'a flowchart', 'Unicode', 'image compression', 'a ZIP file', 'a receipt',
    'a warranty', 'a debit card', 'an ATM', 'a passport', 'jet lag', 'volunteering', 'a resume', 'the minimum wage',
    'a franchise', 'punctuation', 'a verb', 'an adjective', 'a metaphor', 'a thesaurus', 'long division', 'ratios',
    'an equation', 'place value', 'a number line', 'a Venn diagram', 'the Stone Age', 'knights', 'castles', 'samurai',
    'pirates', 'the Maya', 'Mesopotamia', 'the Mongol Empire', 'the Age of Exploration', 'the Enlightenment',
    'the Berlin Wall', 'the European Union', 'the Red Cross', 'the Nobel Prize', 'the Titanic', 'jazz',
    'an orchestra', 'opera', 'ballet', 'origami', 'calligraphy', 'a documentary', 'a triathlon', 'martial arts',
    'surfing', 'cricket', 'yogurt', 'honey', 'vinegar', 'olive oil', 'ice cream', 'food preservation',
]
WAVE6_SENTENCES = [
    'The plane lands at noon.', 'Could you pass me the salt, please?', 'We forgot to buy eggs.',
    'The bus driver was very kind.', 'The office is on the fifth floor.', 'There is a bakery across the street.',
    'My bike has a flat tire.', 'The tickets are sold out.', 'We are waiting for the taxi.',
    'Please take off your shoes.', 'The coffee machine is broken.', 'I usually go to bed at eleven.',
    'Our neighbors are very friendly.', 'The lesson was difficult but interesting.', 'I have never been to Asia.',
    'The shop accepts cash only.', 'My father likes to fish on the weekend.', 'The apples are on sale today.',
    'Can I try on this jacket?', 'The wind is very strong today.', 'We planted tomatoes in the garden.',
    'He missed the last train home.', 'The doctor told me to rest.', 'How long does the trip take?',
    'I left my wallet in the car.', 'Our classroom has big windows.', 'The pool is closed for cleaning.',
    'Would you like some dessert?', 'She runs faster than her brother.', 'The printer is out of paper.',
    'I will send you the photos tonight.', 'The mountains are covered with snow.',
    'We celebrated my birthday at home.', 'Please keep the door closed.', 'My sister wants to become a lawyer.',
    'The post office is next to the bank.', 'I am not feeling well today.', 'This bag is too heavy for me.',
    'The festival starts on Saturday.', 'Do you know a good hairdresser?', 'The river is very wide here.',
    'We need to fix the roof.', 'The waiter brought us the menu.', 'I ate too much cake.', "Let's take a break.",
    'The elevator is not working.', 'My grandfather was a farmer.', 'The stars are bright tonight.',
    'The children are laughing in the yard.', 'Our new neighbor plays the violin.',
]
WAVE6_LIST_THINGS = [
    'ways to make a small room look bigger', 'famous jazz musicians', 'countries in the Middle East',
    'benefits of gardening', 'famous astronomers', 'foods rich in omega-3', 'things to do in Tokyo',
    'ideas for a class party', 'questions to ask a landlord', 'brass instruments', 'ways to support local businesses',
    'dwarf planets', 'word games', 'uses of spreadsheets', 'tips for writing a short story',
    'ways to stay organized at school', 'animals that live in the rainforest', 'adventure novels',
    'cleaning products for the home', 'reasons to learn geography', 'winter sports', 'dynamic programming problems',
    'famous photographers', 'creative hobbies', 'reasons to visit a national park', 'features of a good backpack',
    'types of bridges', 'famous landmarks in Africa', 'ways to spend a lazy Sunday', 'foods rich in magnesium',
    'tips for backing up your files', 'benefits of stretching', 'types of computer memory',
    'ways to encourage kids to eat vegetables', 'tips for growing strawberries', 'ways to organize a bookshelf',
    'inventions of ancient China', 'tips for learning chemistry', 'types of polygons', 'features of Rust',
    'useful browser extensions', 'HTML tags for beginners', 'animals that live underground',
    'tips for starting a new job', 'autumn activities for kids', 'things to see in a botanical garden',
    'qualities of a good neighbor', 'tips for making presentation slides', 'dishes from India',
    'islands in the Mediterranean', 'famous waterfalls', 'famous tennis players', 'exercises for the legs',
    'ways to welcome a new classmate', 'drinks from around the world', 'ways to practice spelling',
    'popular horse breeds', 'types of tea', 'signs that a plant needs water', 'tips for walking safely at night',
    'ways to reuse old clothes', 'string methods in Python', 'common Python errors', 'useful spreadsheet functions',
    'famous biologists', 'animals with stripes', 'tips for a first camping trip',
    'ways to celebrate the end of the school year', 'types of sandwiches', 'safety rules in a science lab',
    'parts of a flower', 'parts of a computer', 'ways to learn the multiplication tables', 'types of storms',
    'tips for debugging code', 'design patterns in programming', 'types of databases',
    'tips for writing a polite email', 'famous speeches in history', 'national parks in the United States',
]
WAVE6_JSON_ENTITIES = [
    ('a bakery', 'name, city, specialty'), ('a backpack', 'brand, volume_l, price'),
    ('a bus route', 'number, first_stop, last_stop'), ('a bridge', 'name, length_m, year_built'),
    ('a dentist appointment', 'patient, date, time'), ('a scientist', 'name, field, nationality'),
    ('an ingredient', 'name, quantity, unit'), ('a volunteer', 'name, skills, hours'),
    ('a train station', 'name, city, platforms'), ('a pair of headphones', 'brand, wireless, price'),
    ('a gym membership', 'member, plan, expires'), ('a castle', 'name, country, built'),
    ('a comic book', 'title, publisher, issue'), ('a musical instrument', 'name, family, price'),
    ('a houseplant', 'name, sunlight, water_per_week'), ('a power bank', 'brand, capacity_mah, price'),
    ('a school', 'name, city, students'), ('a chess game', 'white, black, result'),
    ('a library loan', 'book, member, due_date'), ('a kitchen appliance', 'name, brand, watts'),
    ('a weather station', 'id, location, altitude_m'), ('a football match', 'home_team, away_team, score'),
    ('a pharmacy', 'name, address, open_24h'), ('a bird sighting', 'species, location, date'),
    ('a shopping list', 'store, items, budget'), ('a poem', 'title, poet, lines'),
    ('an electric scooter', 'brand, range_km, price'), ('a rental car', 'model, daily_rate, seats'),
    ('a GitHub repository', 'name, stars, language'), ('an email message', 'sender, subject, sent_at'),
]
WAVE6_WRITING = [
    'Write a short poem about a lighthouse.', 'Write a haiku about the first snow.',
    'Write a short story about a boy who finds an old map.',
    'Write an email asking a teacher for an extension on an assignment.',
    'Write a congratulations message for a friend who passed a driving test.',
    'Write a product description for a wool scarf.', "Summarize the plot of Charlotte's Web.",
    'Write a tweet announcing a new podcast episode.', 'Write a limerick about a goat.',
    'Write a short toast for an anniversary dinner.', 'Describe a bakery in the early morning in three sentences.',
    'Write a cover letter for a library assistant position.', 'Write a short review of a local bus service.',
    'Write an email asking a coworker to swap shifts.', 'Write a poem about a rainy afternoon.',
    'Write a haiku about a butterfly.', 'Write a short story about a penguin who wants to fly.',
    'Write a welcome message for a cooking class.', 'Write a text message asking a friend to return a borrowed book.',
    'Summarize the story of Jack and the Beanstalk.', 'Write a slogan for a recycling campaign.',
    'Write a short bio for a science teacher.', 'Write a recipe for a vegetable omelette.',
    'Describe a summer fair in three sentences.', 'Write a short fable about a turtle and an eagle.',
    'Write an email to a company asking about a delayed order.', 'Write a short poem about the first day of school.',
    'Write a job posting for a delivery driver.', 'Write instructions for washing a car.',
    'Write a short story about an old clock that can stop time.', 'Write a thank-you note to a nurse.',
    'Summarize the plot of Robinson Crusoe.', 'Write a joke about dentists.',
    'Write a short announcement for a neighborhood yard sale.', 'Write a letter to a grandparent.',
    'Write a short speech for the opening of a new library.', 'Write a description of a quiet reading room.',
    'Write a short blog post about learning to swim as an adult.', 'Write an apology message for forgetting a birthday.',
    'Write a short poem about the city in spring.', 'Write a short story about a cat who runs a bakery.',
    'Write a reminder message for a parent-teacher meeting.', 'Write a short review of a board game.',
    "Summarize the story of The Emperor's New Clothes.", 'Write a riddle about a shadow.',
    'Write a short invitation to a baby shower.', 'Write a short note to thank volunteers after a charity event.',
    'Describe a harbor at sunset in three sentences.', 'Write a motivational quote about trying new things.',
    'Write a short dialogue between a librarian and a student.',
]
WAVE6_SNIPPETS = [
    'def sum_odds(nums):\n    total = 0\n    for n in nums:\n        if n % 2 == 1:\n            total += n\n    return total\n',
    'def middle(xs):\n    return xs[len(xs) / 2]\n',
    'def count_char(text, ch):\n    count = 0\n    for c in text:\n        if c == ch:\n            count += 1\n    retrun count\n',
    'def area(width, height):\n    return width * heigth\n',
    "def shout(msg):\n    return msg.upper() + '!'\n",
    'def is_odd(n):\n    return n % 2 == 0\n',
    "def initials(name):\n    parts = name.split()\n    return ''.join(p[0] for p in parts)\n",
    "def repeat(word, times):\n    result = ''\n    for i in range(times)\n        result += word\n    return result\n",
    'def total_length(words):\n    n = 0\n    for w in words:\n        n += len(w)\n    return n\n',
    'def smallest(xs):\n    best = xs[0]\n    for x in xs:\n        if x > best:\n            best = x\n    return best\n',
]
WAVE6_PARAGRAPHS = [
    'The school was founded on September 4, 1962. A new science building opened on March 15, 1999, and the school celebrated its sixtieth anniversary on September 4, 2022.',
    'My brother have two dogs and they runs very fast. Every morning he take them to the park, but yesterday one of them escape.',
    'Please be aware that the swimming pool will be closed for maintenance this weekend. Members can use the gym as usual, and the pool will reopen on Monday morning.',
    'The festival was first held on June 21, 1978. It moved to the old harbor in 2004, and the organizers announced a new winter edition on December 12, 2024.',
    'Last night we watches a film at the cinema. The story were boring, but the popcorn was good and my friends laughs a lot.',
    'The course introduces the basics of photography. Students learn how to hold a camera, choose the light and take simple portraits over four evenings.',
    'The new student dont speak much English, but she learn very quickly. Yesterday she ask me to help her with the homework.',
    'Residents are reminded that the water supply will be interrupted on Thursday between nine and twelve for repairs. We apologize for the inconvenience.',
]


def head_wave6_prompts(seed: int = 0) -> list[str]:
    """The sixth wave of the head's pool (stage 10): the same request families over new items, in no earlier pool
    nor the held-out sets."""
    return _wave("WAVE6", random.Random(seed + 11), [head_training_prompts(seed), head_extra_prompts(seed),
                                                      head_wave4_prompts(seed), head_wave5_prompts(seed)])


# The seventh wave (stage 12): no new items; every earlier pool's items (the six lists of each family) under request
# templates no pool used, drawn per item. Users ask for the same things in many ways; the head met each item under one
# or two phrasings.
CODE_REPHRASE_TEMPLATES = ["How do I write a Python function that {}?",
                           "Write a Python function that {}. Include an example of how to call it.",
                           "Write a TypeScript function that {}.", "Write a short Python script that {}.",
                           "Write a JavaScript function that {}, with comments."]
EXPLAIN_REPHRASE_TEMPLATES = ["What are the pros and cons of {}?", "Give three facts about {}.",
                              "Explain {} step by step.", "How does {} work?", "Summarize {} in one paragraph.",
                              "What is {} and why does it matter?"]
LIST_REPHRASE_TEMPLATES = ["Give me {} {}.", "What are {} {}?", "Can you list {} {}?"]
JSON_REPHRASE_TEMPLATES = ["Show {} as a JSON object with the fields {}.",
                           "Create a JSON array of two examples of {} with the fields {}.",
                           "Write a JSON object for {} with the fields {}, then explain each field."]
TRANSLATE_REPHRASE_TEMPLATES = ["How do you say \"{}\" in {}?", "Translate this sentence into {1}: {0}"]
WRITING_REPHRASE_TEMPLATES = ["Write a short dialogue about {}.", "Write a tweet about {}.",
                              "Write a short email to a friend about {}.", "Write a limerick about {}."]
_POOLS = ("", "WIDE_", "MORE_", "WAVE4_", "WAVE5_", "WAVE6_")


def _every(name: str) -> list:
    """Every pool's list NAME (CONCEPTS, WIDE_CONCEPTS, ..., WAVE6_CONCEPTS), in order."""
    return [item for prefix in _POOLS for item in globals()[f"{prefix}{name}"]]


def head_wave7_prompts(seed: int = 0) -> list[str]:
    """The seventh wave of the head's pool (stage 12): every earlier pool's code tasks, concepts, list topics, JSON
    entities and sentences under request templates none of them used (two drawn per item; one writing request per
    concept), and the sixth wave's concepts under REPHRASE_TEMPLATES; in no earlier pool nor the held-out sets."""
    rng = random.Random(seed + 12)
    prompts = {t.format(task) for task in _every("CODE_TASKS") for t in rng.sample(CODE_REPHRASE_TEMPLATES, 2)}
    concepts = _every("CONCEPTS")
    prompts |= {t.format(c) for c in concepts for t in rng.sample(EXPLAIN_REPHRASE_TEMPLATES, 2)}
    prompts |= {rng.choice(WRITING_REPHRASE_TEMPLATES).format(c) for c in concepts}
    prompts |= {t.format(c) for c in WAVE6_CONCEPTS for t in rng.sample(REPHRASE_TEMPLATES, 2)}
    prompts |= {t.format(n, thing) for thing in _every("LIST_THINGS")
                for t, n in zip(rng.sample(LIST_REPHRASE_TEMPLATES, 2), rng.sample([4, 6, 10], 2))}
    prompts |= {t.format(e, f) for e, f in _every("JSON_ENTITIES") for t in rng.sample(JSON_REPHRASE_TEMPLATES, 2)}
    prompts |= {t.format(s, lang) for s in _every("SENTENCES")
                for t, lang in zip(TRANSLATE_REPHRASE_TEMPLATES, rng.sample(TARGET_LANGUAGES, 2))}
    taken = set(heldout_chat_prompts()) | set(grounded_chat_prompts())
    taken |= {p for pool in (head_training_prompts(seed), head_extra_prompts(seed), head_wave4_prompts(seed),
                             head_wave5_prompts(seed), head_rephrase_prompts(seed), head_wave6_prompts(seed))
              for p in pool}
    prompts = sorted(prompts - taken)
    rng.shuffle(prompts)
    return prompts
