"""A small English text sample for the draft-head accuracy sweep (``lowbit eval-head``).

The paragraphs below were written for this package and are dedicated to the public domain
(CC0). They cover everyday prose, science, history-style narrative, instructions, dialogue,
numbers and code-like text, so the hidden states they produce are varied. ``PROMPTS`` are short
requests whose greedy continuations by the model itself add in-distribution positions.
"""
from __future__ import annotations

TEXTS: tuple[str, ...] = (
    """The old lighthouse stood at the end of a narrow spit of land, where the river met the sea. For
more than a century its lamp had turned every night, and the keepers who lived in the small stone
house beside it kept a logbook of every ship that passed. The entries were short and plain: the
time, the weather, the name of the vessel if it could be read, and sometimes a single remark such as
"heavy fog, bell rung until dawn" or "fishing fleet home early, storm coming from the west". When
the lamp was finally automated, the last keeper left the logbooks to the town library, where anyone
can still read them on a rainy afternoon.""",
    """Bread is one of the oldest prepared foods. A simple loaf needs only flour, water, salt and yeast.
Mix five hundred grams of flour with three hundred and fifty grams of warm water and let the mixture
rest for half an hour; this gives the flour time to absorb the water and makes the dough easier to
knead. Then add ten grams of salt and a small spoonful of yeast, knead for about ten minutes until
the dough is smooth and springs back when pressed, and leave it covered in a warm place until it has
doubled in size. Shape it gently, let it rise once more, and bake it in a hot oven for forty minutes.
The loaf is done when it sounds hollow as you tap the bottom.""",
    """Water boils at one hundred degrees Celsius at sea level, but at lower pressure it boils at a lower
temperature. On a high mountain, where the air pressure is much lower, water may boil at only
eighty-five degrees, which is why cooking pasta or eggs takes longer there. The reason is that
boiling happens when the vapour pressure of the liquid equals the pressure of the air above it. A
pressure cooker uses the same principle in reverse: by sealing the pot and raising the pressure
inside, it lets the water reach about one hundred and twenty degrees, so food cooks faster.""",
    """In the spring of that year the village council met to decide what to do about the bridge. The
wooden structure had been repaired so many times that hardly any of the original timber remained,
and after the winter floods one of its supports had begun to lean. Some members wanted to build a
new bridge of stone; others argued that the village could not afford it and that another repair
would last for ten more years. After a long evening of debate they agreed on a compromise: the
damaged support would be replaced at once, and a fund would be started so that a stone bridge could
be built when enough money had been saved. It took twelve years, but the bridge still stands.""",
    """"Are you sure this is the right road?" asked Maya, looking at the map for the third time.
"Of course," said her brother. "We turn left after the farm with the red barn."
"We passed two farms with red barns."
"Then it was the second one." He slowed the car and peered through the windscreen. "Or maybe the
first. Let me check the directions again."
Maya laughed and handed him the phone. "Next time, I am driving, and you are reading the map."
They arrived an hour late, but the lake was as beautiful as everyone had promised, and by the
evening nobody remembered the wrong turn.""",
    """A computer stores numbers in binary, using only the digits zero and one. The number five is
written as 101, because it equals one four, no twos and one one. Eight bits make a byte, which can
hold any whole number from 0 to 255. Real numbers are usually stored in floating-point form, with a
sign, an exponent and a fraction, much like scientific notation: 6.02 times ten to the power of
twenty-three keeps only a few significant digits but covers an enormous range. Using fewer bits per
number saves memory and time, and modern processors can work with numbers of sixteen, eight or even
four bits when a little loss of precision is acceptable.""",
    """To plant a tree, dig a hole twice as wide as the root ball but no deeper. Loosen the soil at the
sides of the hole so the roots can spread easily. Remove the tree from its pot, gently tease out
any roots that circle the ball, and set it in the hole so that the top of the root ball is level
with the ground. Fill the hole with the soil you removed, pressing it down lightly to remove air
pockets, and water it well. For the first summer, water the tree once a week whenever there is no
rain, and keep a circle of mulch around the trunk to hold moisture and keep weeds away.""",
    """The train left the city at seven in the morning. For the first hour the view from the window
was of warehouses, car parks and the backs of houses, but gradually the buildings thinned out and
gave way to fields of wheat and low green hills. A woman across the aisle was knitting a long blue
scarf; a boy near the door was reading a book about dinosaurs and making small noises of surprise.
At the third station a man with a violin case got on, sat down, and fell asleep almost at once. By
noon the train had reached the coast, and everyone stood up to look at the sea.""",
    """def mean(values):
    \"\"\"Return the arithmetic mean of a non-empty list of numbers.\"\"\"
    if not values:
        raise ValueError("mean() needs at least one value")
    return sum(values) / len(values)


def variance(values):
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)

The function mean adds the values and divides by how many there are. The variance measures how far
the values spread around the mean: it is the mean of the squared differences. Its square root, the
standard deviation, has the same units as the data.""",
    """Honeybees communicate the location of flowers with a dance. A forager that has found a good
source of nectar returns to the hive and walks in a figure of eight on the vertical comb. During the
straight part of the figure she waggles her body, and the angle of that straight run, measured from
straight up, tells the other bees the direction of the flowers relative to the sun. The length of
the waggle run tells them the distance: the longer she waggles, the farther they must fly. Other
bees follow her closely, learn the message, and set off to find the flowers for themselves.""",
    """Dear Sam,
Thank you for the books you sent last month. I have finished the one about the history of maps and
started the novel, which I am enjoying very much, although I suspect I already know who the thief
is. The garden has been busy this summer: the tomatoes are finally ripe, the beans have climbed
over the fence into the neighbour's yard, and something, probably a rabbit, has eaten all the
lettuce. We hope you can visit in September, when the weather is cooler. Bring your walking boots;
there is a new path along the river that goes all the way to the old mill.
With love,
Anna""",
    """Markets set prices through the meeting of supply and demand. When a frost destroys part of the
orange harvest, fewer oranges reach the shops, and buyers who still want them compete for the
smaller supply, so the price rises. A higher price in turn encourages growers elsewhere to send
more oranges and persuades some buyers to choose apples instead. Over time these responses push the
price back toward a level at which the quantity people want to buy matches the quantity available.
Economists call that level the equilibrium price, though in real markets it keeps moving.""",
)

PROMPTS: tuple[str, ...] = (
    "Explain how a rainbow forms.",
    "Write a short story about a lost cat who finds its way home.",
    "What are three tips for learning a new language?",
    "Describe the water cycle in simple words.",
    "Give me a recipe for a simple vegetable soup.",
    "Why is the sky blue?",
    "Write a poem about autumn leaves.",
    "How does a bicycle stay upright?",
    "Summarize the rules of chess for a beginner.",
    "What is the difference between weather and climate?",
    "Write a polite email asking a colleague to review a document.",
    "Explain what a prime number is and give five examples.",
    "How do plants make their food?",
    "Describe a busy market on a Saturday morning.",
    "What should I pack for a weekend camping trip?",
    "Explain how to compute the average of a list of numbers in Python.",
)
