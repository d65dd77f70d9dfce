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
