"""Instruction prompts for distilling the flagship draft and for evaluating it.

Prompts are task templates crossed with topics. Training and held-out prompts use disjoint topic
lists, so the draft is evaluated on questions about things it never saw the target answer.
Deterministic: the same lists every run.
"""
from __future__ import annotations

TASKS = [
    "What is {t}?",
    "Explain {t} to a ten-year-old.",
    "Write a short poem about {t}.",
    "Give me three interesting facts about {t}.",
    "Write a short story that involves {t}.",
    "What are the advantages and disadvantages of {t}?",
    "Describe {t} in two sentences.",
    "How would you teach someone about {t}?",
    "Write a haiku about {t}.",
    "Why do people care about {t}?",
    "Summarise the history of {t} briefly.",
    "List five words related to {t} and explain each.",
    "Write a friendly email to a colleague about {t}.",
    "What questions would a student ask about {t}?",
]

TRAIN_TOPICS = [
    "the ocean", "volcanoes", "photosynthesis", "the moon", "gravity", "rainbows", "honey bees",
    "the internet", "electricity", "democracy", "bread baking", "chess", "the piano", "recycling",
    "the Roman Empire", "dinosaurs", "clouds", "sleep", "friendship", "coffee", "mountains",
    "trains", "the human heart", "libraries", "solar panels", "penguins", "the alphabet",
    "money", "vaccines", "football", "gardening", "the Great Wall of China", "rivers",
    "computers", "music", "earthquakes", "mathematics", "birds", "deserts", "the weather",
]

HELDOUT_TOPICS = [
    "the sun", "forests", "bicycles", "the brain", "glaciers", "water", "robots",
    "the printing press", "butterflies", "tea",
]

SYSTEM_FREE_EXTRA = [  # prompts without a template, for variety
    "Hello! How are you today?",
    "Can you help me plan a picnic?",
    "Tell me a joke.",
    "What should I cook for dinner tonight?",
    "How do I stay focused while studying?",
    "Translate 'good morning' into French and Spanish.",
    "What is 12 times 7? Show your working.",
    "Suggest a name for a pet cat.",
]


def train_prompts() -> list[str]:
    return [task.format(t=topic) for topic in TRAIN_TOPICS for task in TASKS] + SYSTEM_FREE_EXTRA


def heldout_prompts() -> list[str]:
    return [task.format(t=topic) for topic in HELDOUT_TOPICS for task in TASKS]


def heldout_tasks() -> list[str]:
    """The task template of each of heldout_prompts(), in the same order."""
    return [task for _ in HELDOUT_TOPICS for task in TASKS]

MORE_TASKS = [  # used only for the second round of teacher data (more_prompts)
    "How does {t} work?",
    "What is a common misconception about {t}?",
    "Write a tweet about {t}.",
    "Tell me a fun fact about {t}.",
    "Give a step-by-step introduction to {t}.",
    "Compare {t} with something similar.",
]

MORE_TOPICS = [
    "the stock market", "bees and flowers", "the Olympic Games", "climate change", "the camera",
    "ancient Egypt", "the telephone", "whales", "airplanes", "snow", "cats", "dogs", "the desert fox",
    "the periodic table", "DNA", "the immune system", "black holes", "the Milky Way", "Mars",
    "artificial intelligence", "video games", "the guitar", "painting", "poetry", "theatre",
    "the Renaissance", "the Industrial Revolution", "the French Revolution", "castles", "knights",
    "pirates", "the Amazon rainforest", "coral reefs", "sharks", "elephants", "lions", "owls",
    "ants", "spiders", "mushrooms", "potatoes", "chocolate", "pizza", "rice", "cheese",
    "vitamins", "exercise", "yoga", "meditation", "running a marathon", "swimming", "tennis",
    "basketball", "cricket", "the violin", "jazz", "opera", "film making", "photography",
    "smartphones", "email", "passwords", "encryption", "programming", "Python programming",
    "databases", "spreadsheets", "the calendar", "clocks", "maps", "compasses", "lighthouses",
    "bridges", "skyscrapers", "tunnels", "cars", "electric cars", "batteries", "magnets",
    "light", "sound", "heat", "atoms", "the speed of light", "time zones", "the seasons",
    "tides", "hurricanes", "tornadoes", "lightning", "fossils", "archaeology", "museums",
    "newspapers", "elections", "taxes", "banks", "shopping", "cooking pasta", "kindness",
    "courage", "happiness", "learning a language", "writing an essay", "public speaking",
    "job interviews", "teamwork", "time management", "saving money", "the number zero",
    "prime numbers", "fractions", "geometry", "statistics", "the Pythagorean theorem",
]

GENERAL_PROMPTS = [  # everyday questions a class might type
    "What is the capital of France?", "What is the capital of Japan?", "Who wrote Romeo and Juliet?",
    "How many days are in a leap year?", "What is the largest planet in our solar system?",
    "Why is the sky blue?", "How do airplanes stay in the air?", "What is the boiling point of water?",
    "Who painted the Mona Lisa?", "What is the tallest mountain in the world?",
    "How many continents are there? Name them.", "What is the difference between weather and climate?",
    "Give me a recipe for pancakes.", "How do I make a cup of tea?", "What is 15 plus 27?",
    "What is the square root of 81?", "Convert 100 degrees Celsius to Fahrenheit.",
    "Write a limerick about a cat.", "Tell me a bedtime story.", "Write a thank-you note to a teacher.",
    "What are the primary colours?", "How many legs does a spider have?", "What do plants need to grow?",
    "Explain what a verb is.", "What is the plural of mouse?", "Give me a synonym for happy.",
    "How can I improve my handwriting?", "What is a good way to start a conversation?",
    "Recommend three classic novels.", "What is the speed of sound?", "Why do we have day and night?",
    "What is the longest river in the world?", "How does a rainbow form?", "Who was Albert Einstein?",
    "Who was Marie Curie?", "What is machine learning?", "What is a computer virus?",
    "How do I write a for loop in Python?", "What does HTML stand for?", "What is a black hole?",
    "Write a motivational quote.", "What should I pack for a beach holiday?",
    "How do I care for a houseplant?", "What are some healthy breakfast ideas?",
    "Describe a sunset.", "What is the meaning of the word 'ephemeral'?",
    "Summarise the story of Cinderella.", "What are the rules of chess in brief?",
    "Why do cats purr?", "What is the population of the world, roughly?",
]


def more_prompts() -> list[str]:
    """The second round of teacher prompts: new topics under all tasks, old topics under the new
    tasks, and everyday questions; all disjoint from the held-out topics."""
    tasks = TASKS + MORE_TASKS
    return ([task.format(t=topic) for topic in MORE_TOPICS for task in tasks]
            + [task.format(t=topic) for topic in TRAIN_TOPICS for task in MORE_TASKS] + GENERAL_PROMPTS)

WIDE_TOPICS = [  # the third kind of teacher data (wide_prompts): many topics, few tasks each
    "the Arctic", "Antarctica", "the Sahara", "the Himalayas", "the Nile", "the Pacific Ocean",
    "islands", "caves", "lakes", "swamps", "prairies", "canyons", "beaches",
    "geysers", "the equator", "the North Pole", "continents", "the Earth's core", "minerals",
    "diamonds", "gold", "iron", "copper", "salt", "sand", "soil", "rocks", "crystals", "oil",
    "natural gas", "coal", "nuclear power", "wind turbines", "dams", "the power grid",
    "light bulbs", "candles", "fire", "smoke alarms", "firefighters", "police officers", "doctors",
    "nurses", "teachers", "farmers", "pilots", "astronauts", "scientists", "engineers", "artists",
    "chefs", "lawyers", "architects", "plumbers", "carpenters", "postal workers", "hospitals",
    "schools", "universities", "zoos", "parks", "playgrounds", "airports", "harbours", "markets",
    "restaurants", "hotels", "cinemas", "stadiums", "farms", "factories", "offices", "kitchens",
    "gardens in winter", "umbrellas", "shoes", "hats", "buttons", "zippers", "scissors",
    "pencils", "paper", "ink", "books", "dictionaries", "encyclopedias", "comics", "fairy tales",
    "myths", "legends", "dragons", "unicorns", "superheroes", "wizards", "ghost stories",
    "riddles", "puzzles", "crosswords", "board games", "card games", "dice", "kites",
    "balloons", "toys", "dolls", "building blocks", "magic tricks", "circuses", "clowns",
    "birthdays", "weddings", "holidays", "festivals", "fireworks", "parades", "gifts",
    "thank-you letters", "postcards", "stamps", "coins", "banknotes", "credit cards",
    "budgets", "loans", "insurance", "investing", "inflation", "trade", "supply and demand",
    "advertising", "brands", "shops", "online shopping", "delivery trucks", "ships",
    "submarines", "sailing boats", "canoes", "hot air balloons", "helicopters", "rockets",
    "satellites", "space stations", "telescopes", "microscopes", "thermometers", "scales",
    "rulers", "measuring time", "the metric system", "kilograms", "temperature", "pressure",
    "friction", "energy", "motion", "waves", "echoes", "colours", "mirrors", "lenses",
    "shadows", "electric circuits", "static electricity",
    "algorithms", "binary numbers", "the cloud", "social media", "search engines", "websites",
    "online safety", "video calls", "keyboards", "printers", "headphones", "radio", "television",
    "podcasts", "cartoons", "animation", "comedy", "drama", "dance", "ballet", "hip hop",
    "rock music", "classical music", "drums", "the flute", "the trumpet", "singing", "choirs",
    "orchestras", "sculpture", "pottery", "knitting", "sewing", "woodworking", "origami",
    "drawing", "calligraphy", "architecture", "gothic cathedrals", "pyramids", "temples",
    "ancient Greece", "ancient Rome's roads", "the Vikings", "the Aztecs", "the Maya",
    "the Silk Road", "samurai", "medieval villages", "explorers", "Christopher Columbus",
    "the Moon landing", "World War One", "the Cold War", "the United Nations", "human rights",
    "voting", "laws", "courts", "parliaments", "kings and queens", "flags", "national anthems",
    "languages", "grammar", "punctuation", "spelling", "sign language", "Braille",
    "storytelling", "journalism", "debate", "philosophy", "ethics", "logic", "curiosity",
    "honesty", "patience", "gratitude", "empathy", "loneliness", "anger", "fear", "stress",
    "motivation", "habits", "goals", "failure", "success", "creativity", "memory", "dreams",
    "the five senses", "eyes", "ears", "teeth", "bones", "muscles", "skin", "blood",
    "the lungs", "the stomach", "germs", "bacteria", "viruses", "the common cold", "allergies",
    "first aid", "hand washing", "nutrition", "fruit", "vegetables", "apples", "bananas",
    "oranges", "strawberries", "carrots", "tomatoes", "beans", "nuts", "eggs", "milk",
    "yogurt", "soup", "salad", "sandwiches", "noodles", "sushi", "curry", "tacos", "ice cream",
    "cake", "cookies", "sugar", "spices", "breakfast", "picnics", "camping", "hiking",
    "fishing", "skiing", "surfing", "skateboarding", "rock climbing", "horse riding",
    "golf", "baseball", "volleyball", "rugby", "boxing", "martial arts", "gymnastics",
    "the World Cup", "referees", "coaches", "fans", "horses", "cows", "sheep", "goats", "pigs",
    "chickens", "rabbits", "mice", "squirrels", "foxes", "wolves", "bears", "deer", "moose",
    "tigers", "leopards", "cheetahs", "giraffes", "zebras", "hippos", "rhinos", "gorillas",
    "monkeys", "kangaroos", "koalas", "pandas", "camels", "bats", "frogs", "snakes", "lizards",
    "turtles", "crocodiles", "octopuses", "jellyfish", "dolphins", "seals", "crabs", "salmon",
    "eagles", "parrots", "crows", "swans", "flamingos", "hummingbirds", "ladybugs",
    "dragonflies", "worms", "snails", "pets", "veterinarians", "dog training", "bird watching",
    "endangered species", "pollution", "plastic waste", "composting", "wildlife conservation",
    "national parks", "air quality", "droughts", "floods", "wildfires", "fog", "hail", "wind",
    "comets", "asteroids", "Jupiter", "Saturn's rings", "Venus",
    "constellations", "the Big Bang", "aliens", "gravity on other planets", "chemistry",
    "biology", "physics", "geography", "history", "economics", "psychology", "sociology",
    "engineering", "medicine", "astronomy", "geology", "ecology", "genetics", "evolution",
    "cells", "plants", "seeds", "flowers", "roses", "cactuses", "bamboo", "moss",
    "algae", "leaves in autumn", "spring", "summer", "winter", "morning routines", "weekends",
    "cleaning the house", "cooking for friends", "moving house", "neighbours", "families",
    "grandparents", "siblings", "babies", "teenagers", "growing older", "volunteering",
    "charity", "community gardens", "public transport", "buses", "the underground railway",
    "traffic lights", "road safety", "driving lessons", "road trips", "travel", "passports",
    "tourism", "souvenirs", "packing a suitcase", "hotels by the sea",
]


WIDE_TOPICS_2 = [  # the fourth kind of teacher data (wide_prompts(1)): more new topics, fewer tasks each
    "Iceland", "Japan's islands", "the Alps", "the Andes", "the Amazon river", "the Mississippi",
    "the Mediterranean Sea", "the Dead Sea", "the Grand Canyon", "Mount Everest",
    "the Great Barrier Reef", "the Atlantic Ocean", "coastlines", "hot springs", "sand dunes",
    "oases", "jungles", "wetlands", "tundra", "savannas", "valleys", "hills", "cliffs",
    "peninsulas", "deltas", "fjords", "bays", "reefs", "marshes", "Paris", "London", "New York",
    "Tokyo", "Rome", "Cairo", "Mumbai", "Sydney", "Rio de Janeiro", "Istanbul", "Venice",
    "Amsterdam", "Mexico City", "Beijing", "Nairobi", "small towns", "villages", "cities at night",
    "suburbs", "capital cities", "Canada", "Brazil", "India", "China", "Egypt", "Kenya",
    "Australia", "Norway", "Italy", "Peru", "quartz", "marble", "granite", "limestone", "clay",
    "glass", "plastic", "rubber", "cotton", "wool", "silk", "leather", "steel", "aluminium",
    "silver", "platinum", "concrete", "bricks", "wood", "paper mills", "hammers", "screwdrivers",
    "nails", "glue", "tape", "ladders", "wheelbarrows", "shovels", "rakes", "lawn mowers",
    "toolboxes", "saws", "drills", "locks", "keys", "door bells", "windows", "doors", "stairs",
    "roofs", "chimneys", "fences", "gates", "mailboxes", "sofas", "beds", "pillows", "blankets",
    "curtains", "carpets", "lamps", "alarm clocks", "refrigerators", "ovens", "microwaves",
    "toasters", "kettles", "dishwashers", "washing machines", "vacuum cleaners", "irons",
    "air conditioners", "heaters", "thermostats", "backpacks", "wallets", "watches", "glasses",
    "gloves", "scarves", "socks", "jackets", "raincoats", "boots", "sneakers", "uniforms",
    "pyjamas", "jewellery", "rings", "necklaces", "perfume", "soap", "toothpaste", "shampoo",
    "towels", "combs", "haircuts", "plumbing", "electricians", "mechanics", "bakers", "butchers",
    "fishermen", "librarians", "judges", "journalists", "photographers", "musicians", "actors",
    "dancers", "writers", "poets", "painters", "designers", "programmers", "accountants",
    "bankers", "shopkeepers", "waiters", "cleaners", "gardeners", "bus drivers", "taxi drivers",
    "train drivers", "sailors", "soldiers", "lifeguards", "paramedics", "dentists", "pharmacists",
    "surgeons", "midwives", "psychologists", "social workers", "translators", "tour guides",
    "principals", "inventors", "entrepreneurs", "managers", "receptionists", "security guards",
    "miners", "builders", "welders", "tailors", "florists", "libraries in villages", "bakeries",
    "pharmacies", "post offices", "bus stations", "train stations", "petrol stations", "car parks",
    "shopping malls", "supermarkets", "bookshops", "cafes", "fire stations", "police stations",
    "town halls", "courthouses", "prisons", "churches", "mosques", "lighthouses at night",
    "windmills", "castles in Scotland", "palaces", "towers", "monuments", "statues", "fountains",
    "squares", "the wheel", "the compass", "the steam engine", "the telescope's invention",
    "the light bulb's invention", "the telegraph", "the radio's invention",
    "the aeroplane's invention", "the car's invention", "penicillin", "antibiotics", "anaesthesia",
    "X-rays", "the microscope's invention", "the clock's invention", "writing systems",
    "paper money", "the plough", "irrigation", "ancient China", "ancient India", "Mesopotamia",
    "the Persian Empire", "the Ottoman Empire", "the Mongol Empire", "the British Empire",
    "the Incas", "the Celts", "the Normans", "the Middle Ages", "the Age of Exploration",
    "the Enlightenment", "the American Revolution", "the abolition of slavery", "the suffragettes",
    "the Great Depression", "World War Two", "the fall of the Berlin Wall", "the space race",
    "Leonardo da Vinci", "Isaac Newton", "Charles Darwin", "Galileo", "Shakespeare", "Mozart",
    "Beethoven", "Ada Lovelace", "Nikola Tesla", "Thomas Edison", "Florence Nightingale",
    "Nelson Mandela", "Mahatma Gandhi", "Cleopatra", "Julius Caesar", "Napoleon", "Queen Victoria",
    "Abraham Lincoln", "Martin Luther King", "Amelia Earhart", "fairness", "justice", "freedom",
    "responsibility", "respect", "trust", "loyalty", "forgiveness", "generosity", "humility",
    "confidence", "shyness", "jealousy", "boredom", "excitement", "surprise", "sadness", "joy",
    "hope", "nostalgia", "homesickness", "good manners", "apologising", "sharing",
    "making friends", "arguments", "compromise", "leadership", "peer pressure", "listening",
    "reading aloud", "note taking", "revision", "exams", "homework", "school uniforms",
    "school trips", "science fairs", "spelling bees", "lunch breaks", "recess", "graduation",
    "scholarships", "online courses", "tutoring", "study groups", "asking questions",
    "critical thinking", "addition", "subtraction", "multiplication", "division", "percentages",
    "decimals", "negative numbers", "equations", "algebra", "graphs", "probability", "averages",
    "shapes", "triangles", "circles", "angles", "symmetry", "patterns", "infinity", "pi",
    "atoms and molecules", "chemical reactions", "acids and bases", "metals", "gases", "liquids",
    "solids", "melting", "boiling", "evaporation", "condensation", "oxygen", "carbon dioxide",
    "hydrogen", "nitrogen", "rust", "fire extinguishers", "explosions", "fireflies",
    "electric motors", "generators", "transformers", "wires", "switches", "fuses", "plugs",
    "sockets", "solar cells", "hydroelectric power", "geothermal energy", "tidal power",
    "biofuels", "energy saving", "insulation", "heat pumps", "electric bills", "power cuts",
    "smart meters", "charging stations", "the internet of things", "smart speakers",
    "virtual reality", "augmented reality", "drones", "self-driving cars", "chatbots",
    "cybersecurity", "hackers", "computer chips", "memory cards", "hard drives",
    "operating systems", "apps", "software updates", "bugs in software", "open source software",
    "coding for kids", "GPS", "barcodes", "QR codes", "touch screens", "cameras in phones",
    "emoji", "text messages", "online games", "streaming music", "streaming films", "e-books",
    "digital art", "blogs", "vlogs", "influencers", "memes", "online reviews", "fake news",
    "privacy", "screen time", "marathons", "the Tour de France", "Formula One", "ice hockey",
    "figure skating", "snowboarding", "badminton", "table tennis", "archery", "fencing", "rowing",
    "sailing races", "diving", "triathlons", "chess tournaments", "the Paralympics",
    "sports injuries", "warming up", "team captains", "crickets", "grasshoppers", "beetles",
    "moths", "wasps", "fleas", "mosquitoes", "termites", "centipedes", "scorpions", "tortoises",
    "geese", "ducks", "pigeons", "sparrows", "robins", "peacocks", "ostriches", "vultures",
    "woodpeckers", "pelicans", "puffins", "albatrosses", "seagulls", "otters", "beavers",
    "badgers", "hedgehogs", "raccoons", "skunks", "hamsters", "guinea pigs", "ferrets", "llamas",
    "alpacas", "donkeys", "buffalo", "bison", "elk", "reindeer", "polar bears", "walruses",
    "sea lions", "manatees", "narwhals", "orcas", "starfish", "sea horses", "clownfish",
    "goldfish", "eels", "lobsters", "shrimp", "squid", "oysters", "chameleons", "iguanas", "toads",
    "salamanders", "sloths", "anteaters", "armadillos", "hyenas", "meerkats", "lemurs",
    "orangutans", "chimpanzees", "oak trees", "pine trees", "palm trees", "maple syrup", "tulips",
    "daisies", "lilies", "orchids", "lavender", "mint", "basil", "ferns", "ivy", "weeds", "grass",
    "hedges", "vines", "pumpkins", "cucumbers", "onions", "garlic", "lettuce", "spinach",
    "broccoli", "peppers", "corn", "wheat", "oats", "barley", "grapes", "lemons", "limes",
    "cherries", "peaches", "pears", "plums", "mangoes", "pineapples", "coconuts", "blueberries",
    "raspberries", "kiwis", "avocados", "olives", "dates", "figs", "pomegranates", "melons",
    "pancakes", "waffles", "porridge", "omelettes", "toast", "jam", "butter", "honey on toast",
    "peanut butter", "pasta sauces", "dumplings", "burgers", "hot dogs", "fries", "fish and chips",
    "roast dinners", "stews", "pies", "barbecues", "smoothies", "lemonade", "hot chocolate",
    "juice", "popcorn", "crisps", "chewing gum", "sweets", "muffins", "doughnuts",
    "birthday cakes", "cooking with children", "baking bread at home", "table manners",
    "dinner parties", "vegetarian food", "street food", "food markets", "leftovers",
    "meal planning", "food waste", "stars", "galaxies", "nebulae", "meteor showers", "eclipses",
    "the planets", "Mercury", "Neptune", "Uranus", "Pluto", "exoplanets",
    "the International Space Station", "spacesuits", "rocket launches", "moon rocks",
    "space telescopes", "the northern lights", "light years", "the solar system", "rain",
    "drizzle", "thunder", "storms at sea", "snowflakes", "frost", "icicles", "heatwaves",
    "monsoons", "climate zones", "weather forecasts", "barometers", "wind speed", "humidity",
    "the ozone layer", "seasons in the tropics", "the night sky", "the horizon",
]

# Each wide round: (topics, stride, skip, per): topic i is asked under the templates
# (stride * i + skip + j) mod 20 for j < per, TASKS + MORE_TASKS in order. wide_prompts(0) and
# (1) bring new topics (skip 0); wide_prompts(2) and (3) (`--wide-rounds 3` and 4) ask the same
# topics again under the next templates of each topic's rotation, ones it has not had: replies
# the shipped draft never saw score as low as replies on unseen topics (its bound 0.517 on seen
# topics under new templates, 0.516 on wide_prompts(1)'s, 0.53 held out, against 0.65-0.68 on
# the replies it trained on: research/RESULTS.md), so a new template is new data.
WIDE_LISTS = [(WIDE_TOPICS, 5, 0, 5), (WIDE_TOPICS_2, 3, 0, 3), (WIDE_TOPICS_2, 3, 3, 4), (WIDE_TOPICS, 5, 5, 4)]


def wide_prompts(r: int = 0) -> list[str]:
    """Wide round r's teacher prompts: each topic of WIDE_LISTS[r] under `per` of the TASKS +
    MORE_TASKS templates, rotating with the topic (rounds over new topics use every template
    about equally), to show the draft many more distinct replies than the earlier rounds;
    disjoint from the held-out topics. Round 0 (WIDE_TOPICS, 5 templates each) made the
    shipped draft's third kind of data."""
    tasks = TASKS + MORE_TASKS
    topics, stride, skip, per = WIDE_LISTS[r]
    return [tasks[(stride * i + skip + j) % len(tasks)].format(t=topic)
            for i, topic in enumerate(topics) for j in range(per)]
