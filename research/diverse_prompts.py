"""Diverse prompts for the flagship draft's next teacher data (issue 42): chat requests of the
kinds people type, in many task forms, several languages and multi-turn conversations, none of
them in the realistic evaluation set (research/eval_prompts.json; tests/research/test_diverse_data.py
checks that no prompt equals, contains, is contained in, or shares an 8-word run with any of its
messages, and that no subject is a held-out topic of research/prompts.py).

The training data so far came from 14 task templates and 20 more over topic lists
(research/prompts.py); on free-form requests the draft's alpha is far below its template alpha
(research/RESULTS.md). Here each kind of request has its own forms and its own subjects, and
a form is crossed with a style ("Keep it short.", "Answer in Spanish.", ...), so the pool holds
hundreds of task forms over nine kinds of request:

    prompts()        -> [{"id", "kind", "messages": [{"role": "user", "content"}], "follow_up": str | None}]

A "multiturn" prompt carries a follow-up: research.diverse_data samples the teacher's reply to
the first turn, then appends the follow-up and samples the reply to that, so the assistant turn
in the conversation is the target's own. Deterministic: the same list, in the same (shuffled)
order, every run.
"""
from __future__ import annotations

import random

CODING_FORMS = [
    "How do I {s} in Python?", "Show me how to {s} in JavaScript.", "What's the simplest way to {s} in Java?",
    "Write a small C function that does this: {s}.", "I need a bash one-liner to {s}.",
    "Can you explain, step by step, how to {s} with Rust?", "Write Go code to {s} and explain it briefly.",
    "what library should i use to {s} in python", "Give me a SQL query to {s}.",
    "My code should {s} but it doesn't work. What are the usual mistakes?",
    "Write unit tests for a function that should {s}.", "Compare two ways to {s} in Python.",
]
CODING_SUBJECTS = [
    "read a CSV file and print the average of one column", "remove duplicates from a list while keeping order",
    "check whether a number is prime", "merge two sorted lists", "count the words in a text file",
    "download a web page and save it", "sort a list of dictionaries by a key", "flatten a nested list",
    "find the most common element of a list", "convert a date string to a timestamp",
    "rename every file in a folder", "parse command-line arguments", "find the longest line in a file",
    "compute a running total", "validate an email address with a regular expression",
    "split a sentence into words without punctuation", "find the second largest value in an array",
    "group rows by a column and sum another column", "turn a string into title case",
    "generate a random password", "measure how long a function takes",
]

MATHS_FORMS = [
    "{s}", "Can you solve this and show every step? {s}", "{s} Explain it like I'm twelve.",
    "Quick check: {s}", "I keep getting this wrong. {s}",
]
MATHS_SUBJECTS = [
    "What is 15% of 240?", "Solve 3x + 7 = 25.", "A train travels 180 km in 2.5 hours. What is its average speed?",
    "What is the area of a circle with radius 6 cm?", "Simplify (2x^2 * 3x^3) / x.",
    "How many ways can 4 people sit in a row?", "What is the integral of 2x + 5?",
    "Convert 0.375 into a fraction.", "If a price rises by 10% and then falls by 10%, where does it end up?",
    "What is the probability of rolling two sixes with two dice?", "Find the median of 4, 9, 2, 7, 11, 5.",
    "A recipe needs 250 g flour for 4 people. How much for 10 people?", "Solve x^2 - 5x + 6 = 0.",
    "What is the slope of the line through (1, 2) and (4, 11)?", "How many seconds are in a week?",
    "What is 7/8 minus 1/3?", "Is 221 a prime number?", "What is the derivative of e^(2x)?",
    "A rectangle has perimeter 30 and length 9. What is its area?", "What is the sum of the angles of a hexagon?",
]

LANGUAGE_FORMS = [
    "Translate into French: {s}", "How would you say this in Italian? {s}", "Translate to Spanish, informal: {s}",
    "Put this into German, please: {s}", "Translate into Portuguese and explain any tricky words: {s}",
    "What is this in Dutch? {s}", "Translate this into simple English for a learner: {s}",
]
LANGUAGE_SUBJECTS = [
    "Where is the nearest pharmacy?", "I would like two tickets for the evening show.",
    "My phone battery died, can I borrow your charger?", "We are meeting at the station at half past six.",
    "The soup is too salty but the bread is delicious.", "Could you speak more slowly, please?",
    "I have lived here for three years and I still get lost.", "Thank you for inviting me to your wedding.",
    "It rained all weekend, so we stayed inside and played cards.", "How much does it cost to send this parcel?",
    "My brother is taller than me but younger.", "Please close the window, it's cold.",
]
NATIVE_PROMPTS = [  # requests written in other languages
    "Peux-tu m'expliquer comment fonctionne un arc-en-ciel ?", "Écris un petit poème sur l'automne.",
    "¿Qué puedo cocinar con arroz, huevos y tomates?", "Explícame qué es la fotosíntesis en pocas palabras.",
    "Wie kann ich mich besser auf eine Prüfung vorbereiten?", "Erzähl mir einen kurzen Witz über Katzen.",
    "Quali sono i monumenti più famosi di Roma?", "Come si prepara un buon caffè con la moka?",
    "Qual é a diferença entre chuva e garoa?", "Me dá três dicas para dormir melhor?",
    "Hoe maak ik een eenvoudige pannenkoek?", "Czy możesz wyjaśnić, czym jest inflacja?",
]

ADVICE_FORMS = [
    "{s} Any advice?", "What would you do? {s}", "{s} Give me three options.",
    "{s} What should I think about before deciding?", "honestly {s} can you help?",
]
ADVICE_SUBJECTS = [
    "My flatmate never does the dishes.", "I have two job offers and can't choose between them.",
    "I want to take up swimming but the pool is always busy.", "I spend too much money on takeaway food.",
    "My younger sister is nervous about starting secondary school.", "I keep forgetting my friends' birthdays.",
    "I'd like to ask for a raise but I'm scared.", "My laptop is slow and I can't afford a new one.",
    "I want to read more books but never find the time.", "My neighbour plays loud music late at night.",
    "I'm moving to a new city where I know nobody.", "I want to learn to cook beyond pasta.",
    "I get nervous before giving presentations.", "My grandparents want to learn to video call.",
]

CREATIVE_FORMS = [
    "Write a limerick about {s}.", "Write a four-line rhyme about {s}.", "Tell a very short ghost story about {s}.",
    "Write a diary entry from the point of view of {s}.", "Write a product advert for {s}, in a silly tone.",
    "Write song lyrics (one verse and a chorus) about {s}.", "Describe {s} as if it were a villain in a film.",
    "Write a two-paragraph adventure where the hero is {s}.", "Write a sonnet-style poem about {s}.",
    "Write a bedtime story about {s}.", "Write a dialogue between two friends arguing about {s}.",
]
CREATIVE_SUBJECTS = [
    "a lost umbrella", "a lighthouse keeper's cat", "the last day of summer", "a robot learning to paint",
    "a grumpy toaster", "a snail in a hurry", "an empty train at midnight", "a forgotten birthday cake",
    "a pair of odd socks", "a city without cars", "a dragon afraid of heights", "the first snow of the year",
    "a lonely satellite", "a market on a rainy Saturday", "an old key found in a garden",
]

FACTUAL_FORMS = [
    "How does {s} work?", "Can you explain {s} in simple terms?", "What's the science behind {s}?",
    "Give me a short history of {s}.", "What are common myths about {s}?", "ELI5: {s}",
    "I never understood {s}. Can you help?",
]
FACTUAL_SUBJECTS = [
    "a microwave oven", "a dishwasher", "the tides", "a refrigerator", "the stock market",
    "credit scores", "GPS", "the nitrogen cycle", "inflation", "a touchscreen", "the seasons",
    "antibiotic resistance", "a lock and key", "an electric car's battery", "a hot-air balloon",
]
WHY_FORMS = ["Why {s}?", "why {s} lol", "Is there a simple reason why {s}?", "My kid asked me why {s}. What do I say?"]
WHY_SUBJECTS = [
    "do cats purr", "do leaves change colour in autumn", "do onions make you cry", "do we dream",
    "is the sea salty", "do we yawn", "does ice float", "do bread crusts go hard",
    "do our fingers wrinkle in the bath", "does popcorn pop",
]

SUMMARISE_FORMS = [
    "Summarise this in two sentences:\n\n{s}", "TL;DR please:\n\n{s}", "Give me the three key points:\n\n{s}",
    "Explain what this says to a child:\n\n{s}", "Write a headline and a one-line summary for this:\n\n{s}",
]
PASSAGES = [
    "The library will extend its opening hours from next month. On weekdays it will stay open until nine "
    "in the evening, and on Sundays it will open for the first time. The change follows a survey in which "
    "most students asked for more quiet study space. Staff numbers will increase to cover the extra hours.",
    "Octopuses have three hearts and blue blood. Two hearts pump blood to the gills, and the third pumps it "
    "to the rest of the body. Their blood uses a copper-based molecule to carry oxygen. This works well in "
    "cold water with little oxygen, but it is less efficient in warm water.",
    "The city plans to plant ten thousand trees over five years. Trees cool streets in summer, absorb rain "
    "and clean the air. Residents can request a tree outside their home through the council website. Each "
    "tree will be watered by volunteers for its first two years.",
    "A new study followed two thousand adults for ten years. Those who walked at least seven thousand steps "
    "a day had fewer heart problems than those who walked less. The benefit levelled off above about ten "
    "thousand steps. The researchers say that even short daily walks are worthwhile.",
    "The bakery on the corner has closed after forty years. The owners, a married couple, are retiring and "
    "could not find a buyer. Regular customers left flowers and notes at the door on the last day. A coffee "
    "chain has already applied to rent the space.",
    "Sleep helps us store memories. During deep sleep, what happened during the day is replayed and "
    "important connections grow stronger. Students who sleep after learning remember more the next "
    "day than those who stay awake. Pulling an all-nighter before an exam can therefore backfire.",
]

PLANNING_FORMS = [
    "Make me a plan for {s}.", "Help me organise {s}.", "Give me a step-by-step schedule for {s}.",
    "What's a realistic timeline for {s}?", "Draft a checklist for {s}.",
]
PLANNING_SUBJECTS = [
    "a weekend camping trip with friends", "learning to play the guitar in three months",
    "a surprise party for my mum", "revising for five exams in four weeks", "a budget week of packed lunches",
    "decluttering my bedroom", "a day trip to the seaside by train", "training for a 5 km race",
    "a school bake sale", "moving flats on a small budget",
]

MULTITURN = [  # (first user turn, follow-up after the teacher's own reply)
    ("What's a good houseplant for a dark room?", "And how often should I water it?"),
    ("Give me a word that rhymes with orange.", "ok then give me words that almost rhyme"),
    ("What's the capital of Canada?", "Why not Toronto? It's bigger."),
    ("Can you suggest a film for a rainy evening?", "Something funnier, please."),
    ("How do I boil an egg?", "What if I want the yolk runny?"),
    ("What is a haiku?", "Can you write one about my dog?"),
    ("Comment dit-on 'thank you very much' en français ?", "Et 'you're welcome' ?"),
    ("I need a name for my new bakery.", "Something shorter and more playful?"),
    ("What does 'photosynthesis' mean?", "So do plants breathe at night?"),
    ("How many planets are in the solar system?", "What happened to Pluto?"),
    ("Write a Python function that returns the larger of two values.", "Now make it work for a whole list."),
    ("What's 25 times 16?", "How did you work that out so quickly?"),
    ("Recommend a board game for four players.", "Something that takes less than half an hour?"),
    ("¿Cómo se dice 'library' en español?", "¿Y 'bookshop'? Siempre los confundo."),
    ("What should I pack for a beach holiday?", "I'm only taking hand luggage though."),
]

# Continued conversations (research.diverse_data --continue-from): after the teacher's own reply to
# a pool prompt, the user either follows up with one of these, or pastes that reply back to be
# summarised (a passage the teacher wrote, so "summarise" sees many more passages than PASSAGES).
FOLLOW_UPS = [
    "Can you make that a lot shorter?", "Thanks! Could you give me a concrete example?",
    "I don't get it, can you explain it more simply?", "Can you say all of that again in French?",
    "Now translate your answer into Spanish please.", "Kannst du das bitte auf Deutsch wiederholen?",
    "What's the single most important point there?", "ok thanks, is there anything else I should know?",
    "Could you turn that into a short poem?", "Give me a different option than that one.",
    "Explain your first point in more detail.", "Rewrite that as a bullet list.",
    "What would a beginner usually get wrong here?", "Are you sure about that? Please double-check.",
    "Puoi riassumerlo in italiano in due frasi?", "hmm, can you put it in a friendlier tone",
    "Why is that the case? Say more.", "And what if I only had ten minutes for this?",
]
REPLY_SUMMARY_KINDS = {"factual", "advice", "creative", "planning"}  # whose replies read as passages

STYLES = ["", " Keep it short.", " Use bullet points.", " Answer in Spanish.", " Answer in French.",
          " Be friendly and casual.", " Explain your reasoning.", " Answer in German."]

GROUPS = [  # (kind, forms, subjects); every form crossed with every subject of its group
    ("coding", CODING_FORMS, CODING_SUBJECTS), ("maths", MATHS_FORMS, MATHS_SUBJECTS),
    ("languages", LANGUAGE_FORMS, LANGUAGE_SUBJECTS), ("advice", ADVICE_FORMS, ADVICE_SUBJECTS),
    ("creative", CREATIVE_FORMS, CREATIVE_SUBJECTS), ("factual", FACTUAL_FORMS, FACTUAL_SUBJECTS),
    ("factual", WHY_FORMS, WHY_SUBJECTS), ("summarise", SUMMARISE_FORMS, PASSAGES),
    ("planning", PLANNING_FORMS, PLANNING_SUBJECTS),
]
KINDS = sorted({kind for kind, _, _ in GROUPS} | {"multiturn"})  # every prompt's "kind" (native requests: languages)
NO_STYLE = {"languages", "summarise"}   # a style would change the task (translate *and* answer in French?)


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def prompts(seed: int = 0) -> list[dict]:
    """Every prompt of the pool, shuffled with `seed`: kind x form x subject (x style, one drawn
    per prompt, for the kinds a style does not change), the native-language requests and the
    multi-turn openers. Ids are stable: "<kind>-<group>-<form>-<subject>"."""
    rng = random.Random(seed)
    out = []
    for g, (kind, forms, subjects) in enumerate(GROUPS):
        for f, form in enumerate(forms):
            for s, subject in enumerate(subjects):
                style = "" if kind in NO_STYLE else rng.choice(STYLES)
                out.append({"id": f"{kind}-{g}-{f}-{s}", "kind": kind, "follow_up": None,
                            "messages": _user(form.format(s=subject) + style)})
    out += [{"id": f"native-{i}", "kind": "languages", "follow_up": None, "messages": _user(text)}
            for i, text in enumerate(NATIVE_PROMPTS)]
    out += [{"id": f"multiturn-{i}", "kind": "multiturn", "follow_up": follow, "messages": _user(first)}
            for i, (first, follow) in enumerate(MULTITURN)]
    rng.shuffle(out)
    return out


def texts(pool: list[dict]) -> list[str]:
    """Every user text a pool of prompts() sends: first turns, then follow-ups."""
    return [p["messages"][0]["content"] for p in pool] + [p["follow_up"] for p in pool if p["follow_up"]]


def task_forms() -> int:
    """How many task forms the pool has: forms of every kind times styles where a style applies,
    plus each native-language request and multi-turn opener as its own form."""
    return (sum(len(f) * (1 if k in NO_STYLE else len(STYLES)) for k, f, _ in GROUPS)
            + len(NATIVE_PROMPTS) + len(MULTITURN))
