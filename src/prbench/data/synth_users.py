"""Synthetic users with planted preferences: a benchmark where the answer key is known by design.

Why: on real data we cannot tell whether an RM failed to read the profile or the profile did
not say enough. Here each user holds one pole on each of several binary preference dimensions
(diet, budget, indoor/outdoor, classic/contemporary art, light/serious mood, group/solo,
local/global). Their profile posts reveal every pole (templated posts with variety), and each
item is a *minimal pair*: chosen and rejected share one response skeleton, tip and question and
differ only in the recommendation and its one-clause justification, written in parallel for the
two poles (same slot, matched phrase lengths, equal generic quality).

Exchangeability without the profile: for every dimension exactly half the users (all when N is
even) hold each pole, via complementary "twin" users, and questions and skeletons are drawn
independently of the pole. So a user-blind model sees, for the same question, pole A chosen as
often as pole B and is at chance in expectation; only reading the user's context helps.

No length-driven dimension (concise vs detailed) is planted on purpose: chosen and rejected must
have the same length distribution, or a length baseline would beat chance.

Output is benchmark-format `schema.Example`s (category one of `schema.CATEGORIES`, `user_id`
set, `narrative` with the planted preference, `rubric_aspects` whose `evidence` is an exact
narrative span), plus an extra field `planted` (dimension and poles) that no condition reads.
Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from prbench.errors import PrbenchError
from prbench.schema import Example, ProfilePost, RubricAspect

ARTS, LIFE, SOCIETY = "Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"


@dataclass(frozen=True)
class Pole:
    """One side of a preference: how a user who holds it writes, and what answers fit them."""

    name: str
    aspect: str
    reason: str
    narrative: str
    posts: tuple[str, ...]
    picks: tuple[str, ...]  # parallel to the other pole's picks (same index = same slot)
    whys: tuple[str, ...]   # parallel too


@dataclass(frozen=True)
class Dimension:
    """A binary preference. Every question and every post of the dimension contains `topic`, so
    retrieval (BM25) can find the posts that matter for a question, as on real profiles."""

    name: str
    category: str
    topic: str
    questions: tuple[str, ...]
    poles: tuple[Pole, Pole]


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("diet", LIFE, "cook", (
        "What should I cook for dinner when {person} comes over {when}?",
        "Can you suggest an easy meal I could cook for the work week?",
        "What could I cook for a potluck {when}?",
        "I want to cook a new recipe {when}. Any ideas?",
        "What should I cook for a family lunch {when}?",
        "What could I cook on the grill for a backyard get-together {when}?",
    ), (
        Pole("vegetarian", "Vegetarian dishes only",
             "The user does not eat meat and cooks plant-based food.",
             "I stopped eating meat years ago, so I only cook vegetarian food.", (
                 "Made a huge pot of lentil curry {day}. I only cook vegetarian and I love it.",
                 "Does anyone have tips for getting tofu really crispy? It's the protein I cook with most.",
                 "Farmers market haul {day}: squash, chard, mushrooms. Planning to cook plant-based all week.",
                 "Asked {person} how to cook a vegetarian chili, and it came out great with black beans.",
                 "As a vegetarian I cook at home a lot, and I'm happy with beans, grains and vegetables.",
                 "Trying to perfect a mushroom stroganoff to cook when I host: all vegetables, lots of flavor.",
             ), (
                 "a roasted vegetable lasagna with spinach and ricotta",
                 "a chickpea and sweet potato curry over rice",
                 "black bean tacos with grilled corn and avocado",
                 "a mushroom risotto finished with parmesan",
                 "halloumi and zucchini skewers with a lemon dip",
                 "a lentil shepherd's pie with a potato top",
             ), (
                 "since it is fully vegetarian and still filling",
                 "because it stays plant-based without feeling like a compromise",
                 "as it gets its protein from beans and cheese",
                 "because the vegetables are the star",
             )),
        Pole("meat", "Hearty meat-centered dishes",
             "The user loves cooking meat and sees it as the star of a meal.",
             "I love cooking meat, and for me a proper meal is built around a good cut.", (
                 "Smoked a pork shoulder for twelve hours {day}. I love to cook meat low and slow.",
                 "Does anyone have tips for a better crust on a ribeye? Steak is what I cook most.",
                 "Butcher had beautiful short ribs {day}. Planning to cook something meaty all week.",
                 "Asked {person} how to cook a brisket chili, and it came out great with extra beef.",
                 "As a carnivore I cook at home a lot, and I'm happy with a roast, a steak or some ribs.",
                 "Trying to perfect a roast chicken to cook when I host: crispy skin, lots of flavor.",
             ), (
                 "a slow-braised beef ragu over fresh pappardelle",
                 "a chicken thigh curry over spiced rice",
                 "carne asada tacos with grilled corn and salsa",
                 "a pan-seared steak with garlic butter",
                 "pork and pepper skewers with a lemon dip",
                 "a shepherd's pie made with ground lamb",
             ), (
                 "since the meat is the star and it is filling",
                 "because a good cut of meat makes the whole meal feel special",
                 "as it gets its richness from slow-cooked meat",
                 "because it is hearty and meaty",
             )),
    )),
    Dimension("budget", LIFE, "buy", (
        "I need a new laptop for work and hobbies. What should I buy?",
        "What furniture should I buy for my first apartment?",
        "What birthday gift should I buy for {person}?",
        "I want to upgrade my kitchen gear. What should I buy first?",
        "What kind of phone should I buy next?",
        "What should I look for when I buy a new mattress?",
    ), (
        Pole("frugal", "Budget-friendly, low-cost options",
             "The user is saving money and avoids spending more than necessary.",
             "I'm on a tight budget right now and try to spend as little as possible.", (
                 "Found a perfectly good desk at a thrift store {day} for twelve dollars. I buy secondhand whenever I can.",
                 "Sticking to a strict budget this year, so I compare three stores before I buy anything.",
                 "Any tips for finding refurbished electronics that last? I never buy at full price.",
                 "{Person} asked why I wait for sales before I buy. Saving money is just how I'm wired.",
                 "Cancelled two subscriptions {day}. I only buy what I really need these days.",
                 "Coupon stacking saved me a third of the bill again. Cheapest way to buy groceries.",
             ), (
                 "a refurbished model from a reputable seller",
                 "a well-reviewed budget option that covers the basics",
                 "a secondhand piece in good shape from a local listing",
                 "last year's model, which is heavily discounted now",
                 "a store-brand version that performs nearly as well",
                 "a simple starter set you can add to later",
             ), (
                 "so you get what you need and keep the cost low",
                 "because it saves real money for nearly the same use",
                 "since spending less leaves room in the budget",
                 "as the price difference is hard to justify",
             )),
        Pole("premium", "Premium, high-end quality",
             "The user is willing to pay more for the best quality and experience.",
             "I would rather pay more once and get the very best quality available.", (
                 "Finally got a handmade walnut desk {day}. Expensive, but I buy quality pieces that last.",
                 "Happy to pay a premium this year, as long as what I buy is the best in its class.",
                 "Any tips for choosing flagship electronics? I always buy the top-tier model.",
                 "{Person} asked why I splurge when I buy gear. Paying for the best is just how I'm wired.",
                 "Upgraded to the premium plan {day}. I buy the better experience every time.",
                 "Splurged on a high-end chef's knife. Best thing I ever decided to buy for the kitchen.",
             ), (
                 "the flagship model from a top brand",
                 "a high-end option with the finest materials",
                 "a designer piece from a specialist showroom",
                 "this year's top-tier model with every upgrade",
                 "the professional-grade version reviewers rave about",
                 "a complete premium set that will last for decades",
             ), (
                 "so you get the best quality and experience there is",
                 "because the extra cost buys clearly better quality",
                 "since paying more means top performance",
                 "as the premium quality is worth the price",
             )),
    )),
    Dimension("setting", LIFE, "recharge", (
        "What should I do this weekend to recharge?",
        "Can you suggest a new hobby that helps me recharge?",
        "What's a good date idea {when} that helps us both recharge?",
        "Where should I go for a short break to recharge this spring?",
        "How can I recharge on a free afternoon with {person}?",
        "What is a fun way to exercise and recharge?",
    ), (
        Pole("outdoors", "Outdoor and nature activities",
             "The user recharges by being outside in nature.",
             "I feel best when I'm outside in nature, away from buildings and screens.", (
                 "Hiked the ridge trail {day} and watched the sunrise over the valley. Nature is how I recharge.",
                 "Any recommendations for a lightweight tent? Camping trips are how I recharge in summer.",
                 "Spent the afternoon kayaking with {person}. Being out on the lake helps me recharge.",
                 "Can't stand being cooped up on a sunny day. I recharge in the forest.",
                 "Started birdwatching at the lake near my place. Fresh air is the best way to recharge.",
                 "Trail running in the hills beats the treadmill. The outdoors is where I recharge.",
             ), (
                 "a hike on a forest trail with a picnic at the top",
                 "a day of kayaking on a nearby lake",
                 "a night camping under the stars at a state park",
                 "a bike ride along a quiet river path",
                 "an early birdwatching walk through the wetlands",
                 "a stay in a mountain cabin near the trails",
             ), (
                 "since fresh air and nature help you unwind",
                 "because being outdoors gets you away from screens",
                 "as time in nature is relaxing and active at once",
                 "because the scenery outside does the work",
             )),
        Pole("indoors", "Indoor and city-based activities",
             "The user prefers comfortable indoor spaces and urban settings.",
             "I feel best indoors or in the city, with cafes and museums close by.", (
                 "Spent {day} at a cozy bookstore cafe downtown. The city is how I recharge.",
                 "Any recommendations for a good board game? Game nights at home are how I recharge.",
                 "Spent the afternoon at a pottery studio with {person}. Making things indoors helps me recharge.",
                 "Can't stand bugs and mud. I recharge in a museum or a nice cafe.",
                 "Started going to a climbing gym near my place. Indoor workouts are the best way to recharge.",
                 "A rowing class at the gym beats a muddy trail. The city is where I recharge.",
             ), (
                 "an afternoon at a museum with lunch at a cafe",
                 "a session at an indoor climbing gym",
                 "a cooking class at a studio in the city center",
                 "a board game night at a cozy cafe",
                 "a weekend in a city hotel near the galleries",
                 "a pottery workshop at a downtown studio",
             ), (
                 "since a comfortable indoor space helps you unwind",
                 "because the city has everything close by",
                 "as it is relaxing and does not depend on the weather",
                 "because the cozy setting does the work",
             )),
    )),
    Dimension("era", ARTS, "book", (
        "What book should I read next?",
        "What book would make a good gift for {person}?",
        "Which book should my book club pick {when}?",
        "What book should I take on vacation?",
        "Can you recommend a book for a long flight?",
        "I want to read more. What book should I start with?",
    ), (
        Pole("classic", "Classic, time-tested literature",
             "The user loves older canonical literature.",
             "I mostly love the classics, books that have lasted a century or more.", (
                 "Re-read Jane Eyre {day}. An old classic book still hits harder than anything new.",
                 "Working through a list of the great classics this year, one book a month.",
                 "My book club picked a recent bestseller, and I'm already missing nineteenth-century novels.",
                 "{Person} gave me a leather-bound Dickens. Best book gift I've had in years.",
                 "Nothing beats a book by Tolstoy or Austen on a rainy afternoon.",
                 "Found a first edition of an old classic book at a flea market {day}.",
             ), (
                 "a nineteenth-century classic like Middlemarch",
                 "a timeless novel such as Anna Karenina",
                 "the collected stories of Anton Chekhov",
                 "Great Expectations in a good old edition",
                 "the Odyssey in a classic translation",
                 "Persuasion by Jane Austen",
             ), (
                 "since the classics have stood the test of time",
                 "because older works reward a second read",
                 "as the canon offers real depth",
                 "because time-tested writing rarely disappoints",
             )),
        Pole("contemporary", "Contemporary, recent literature",
             "The user follows new releases and living authors.",
             "I mostly love new writing, books released in the last few years by living authors.", (
                 "Finished this year's Booker winner {day}. A new book still hits harder than the old stuff.",
                 "Working through a list of the best new releases this year, one book a month.",
                 "My book club picked a dusty old classic, and I'm already missing this decade's novels.",
                 "{Person} gave me a signed debut novel. Best book gift I've had in years.",
                 "Nothing beats a book by a young living author on a rainy afternoon.",
                 "Got an advance copy of a new book at a launch event {day}.",
             ), (
                 "a recent prize-winning novel from this year",
                 "a fresh debut novel by a young author",
                 "a new short story collection out this spring",
                 "this season's most talked-about new novel",
                 "a bold new novel by a rising author",
                 "the latest novel by Sally Rooney",
             ), (
                 "since new writing speaks to life today",
                 "because recent works feel fresh and current",
                 "as living authors are doing exciting things",
                 "because new releases rarely feel dated",
             )),
    )),
    Dimension("mood", ARTS, "watch", (
        "What movie should I watch tonight?",
        "What TV series should I watch next?",
        "What's a good film to watch with {person}?",
        "What should I watch for a relaxed evening?",
        "What show should I watch {when}?",
        "Can you suggest something to watch on a long flight?",
    ), (
        Pole("lighthearted", "Funny, lighthearted entertainment",
             "The user watches things to laugh and unwind.",
             "When I watch something, I want to laugh and feel good, not feel heavy.", (
                 "Got to watch a silly comedy with {person} {day} and laughed until I cried.",
                 "Give me a feel-good sitcom to watch over a bleak drama any day.",
                 "Anyone have lighthearted movies to watch? I avoid anything too dark.",
                 "Went to watch a stand-up show {day}. Laughing is my favorite way to unwind.",
                 "I watch my favorite romantic comedy again whenever I need cheering up.",
                 "Nothing better to watch after work than a goofy animated film.",
             ), (
                 "a warm comedy with a great ensemble cast",
                 "a feel-good sitcom with short episodes",
                 "an improv comedy special",
                 "a funny, upbeat mockumentary series",
                 "a lighthearted romantic comedy",
                 "an animated adventure full of jokes",
             ), (
                 "since it is fun and easy to laugh along with",
                 "because it leaves you in a good mood",
                 "as it keeps things light and cheerful",
                 "because the humor never lets up",
             )),
        Pole("serious", "Serious, thought-provoking drama",
             "The user values weighty stories that make them think.",
             "When I watch something, I want it to be serious and make me think for days.", (
                 "Got to watch a heavy war drama with {person} {day} and couldn't stop thinking about it.",
                 "Give me a bleak, serious drama to watch over a silly sitcom any day.",
                 "Anyone have serious films to watch? I find most comedies shallow.",
                 "Went to watch a tragic play {day}. Serious stories are my favorite way to reflect.",
                 "I watch a slow, haunting drama again whenever I want to be moved.",
                 "Nothing better to watch after work than a tense political thriller.",
             ), (
                 "a gripping historical drama with a strong cast",
                 "a serious crime series with long episodes",
                 "a filmed staging of a tragedy",
                 "a tense investigative documentary series",
                 "a thought-provoking war film",
                 "a slow, haunting character study",
             ), (
                 "since it is moving and makes you think",
                 "because it stays with you for days",
                 "as it treats its subject with real weight",
                 "because the tension never lets up",
             )),
    )),
    Dimension("social", SOCIETY, "activity", (
        "What activity would help me settle in after moving to a new town?",
        "What volunteer activity should I pick to give back to my community?",
        "What birthday activity would suit me this year?",
        "What holiday activity would feel meaningful {when}?",
        "What activity would keep me motivated while learning a new language?",
        "What weekly activity could I start {when}?",
    ), (
        Pole("together", "Group and community involvement",
             "The user gets energy from doing things with other people.",
             "I get my energy from people, and I'd rather do things as part of a group.", (
                 "Joined a neighborhood association {day} and met half my street. A group activity beats anything.",
                 "Hosting a big potluck for {person} and friends. The more people at an activity, the better.",
                 "Volunteering with a team at the food bank is my favorite activity of the week.",
                 "Signed up for a community choir. Any activity done together keeps me going.",
                 "I can't study alone; my language group is the activity that keeps me motivated.",
                 "Big family gatherings are my favorite holiday activity.",
             ), (
                 "joining a local volunteer group that meets every week",
                 "a big gathering with friends and neighbors",
                 "a community class where you meet the regulars",
                 "a group walking tour led by a local guide",
                 "a team project at the community center",
                 "a language meetup with a regular group",
             ), (
                 "since you meet people and share the experience",
                 "because doing it together keeps you motivated",
                 "as the group makes it more fun",
                 "because you build real connections",
             )),
        Pole("solo", "Independent, solo activities",
             "The user recharges alone and prefers self-directed activities.",
             "I recharge on my own, and I'd rather do things independently at my own pace.", (
                 "Spent {day} exploring the town on my own. A solo activity beats anything.",
                 "Skipping the big party for a quiet evening alone. The fewer people at an activity, the better.",
                 "Volunteering remotely by transcribing archives is my favorite activity of the week.",
                 "Signed up for a self-paced online course. Any activity done alone keeps me going.",
                 "I can't study in groups; solo practice is the activity that keeps me motivated.",
                 "A quiet trip on my own is my favorite holiday activity.",
             ), (
                 "volunteering remotely on a project you do alone",
                 "a quiet day doing something just for yourself",
                 "a self-paced course you can take on your own",
                 "a self-guided walk with an audio guide",
                 "a personal project at home on your schedule",
                 "a language app with daily solo practice",
             ), (
                 "since you can go at your own pace",
                 "because doing it alone keeps you focused",
                 "as solitude makes it more restful",
                 "because you stay in control of your time",
             )),
    )),
    Dimension("scope", SOCIETY, "learn", (
        "What news should I follow to learn what matters?",
        "I'd like to learn about a new culture. How should I go about it?",
        "What cause should I learn about and support this year?",
        "What topic should I learn about for a talk at my club?",
        "How can I learn to broaden my perspective {when}?",
        "What kind of history should I learn about next?",
    ), (
        Pole("local", "Local and hometown focus",
             "The user cares most about their own town and region.",
             "I care most about what happens in my own town and region.", (
                 "Went to the town council meeting {day}. I learn the most from local decisions.",
                 "Reading up on our neighborhood. Fun to learn it was once a mill town.",
                 "Donated to the local library fundraiser again. I like to learn about needs close to home.",
                 "{Person} and I toured the old buildings downtown. I love to learn about my own region.",
                 "I learn more from the city paper than from the national news.",
                 "Our regional food traditions are what I most want to learn about.",
             ), (
                 "your local newspaper and town council updates",
                 "the history society in your own town",
                 "a food bank in your own neighborhood",
                 "the story of a landmark in your region",
                 "a local oral history project",
                 "the history of your own hometown",
             ), (
                 "since that is where you can see the impact",
                 "because it connects you to where you live",
                 "as the place you live has rich stories",
                 "because local ties matter most",
             )),
        Pole("global", "Global and international focus",
             "The user is drawn to other countries and world affairs.",
             "I care most about the wider world and cultures far from where I live.", (
                 "Followed a debate on world trade {day}. I learn the most from global decisions.",
                 "Reading up on the Silk Road. Fun to learn it shaped three continents.",
                 "Donated to an international relief fund again. I like to learn where need is greatest.",
                 "{Person} and I went to a festival of world cinema. I love to learn about faraway countries.",
                 "I learn more from international news than from the city paper.",
                 "Cuisines from other continents are what I most want to learn about.",
             ), (
                 "an international outlet and world affairs podcasts",
                 "a language exchange with people abroad",
                 "an international relief organization",
                 "the story of a trade route across continents",
                 "a global pen pal project",
                 "the history of a faraway country",
             ), (
                 "since the big picture is where things connect",
                 "because it connects you to the wider world",
                 "as other cultures have rich stories",
                 "because global ties matter most",
             )),
    )),
)
DIMENSION_NAMES = tuple(d.name for d in DIMENSIONS)

# Shared by both sides of a pair: skeletons and tips carry generic quality, never the preference.
SKELETONS = (
    "I would suggest {pick}, {why}. {tip}",
    "Here is my pick: {pick}. I recommend it {why}. {tip}",
    "You could go with {pick}. That works well {why}. {tip}",
    "My top suggestion is {pick}, {why}. {tip}",
    "Consider {pick}. It is a solid choice {why}. {tip}",
    "Honestly, {pick} is hard to beat, {why}. {tip}",
)
TIPS = (
    "Plan it a day or two ahead so nothing feels rushed.",
    "Start small and see how you like it before committing more.",
    "Give it a fair try before deciding whether it suits you.",
    "Check the details in advance so there are no surprises.",
    "Keep a short note of what worked so the next time is easier.",
    "Leave some room in the schedule in case things run long.",
)
NEUTRAL_POSTS = (
    ("Does anyone know how to keep basil alive on a windowsill through the winter?", LIFE),
    ("My car needs new tires. Is it worth rotating them every season?", LIFE),
    ("Finally organized my closet {day}. Feels good to see the floor again.", LIFE),
    ("What's the best way to sleep well during a heat wave?", LIFE),
    ("Just adopted a shelter cat. Taking name suggestions!", SOCIETY),
    ("Learning to touch type properly at last, and my wrists are thankful.", LIFE),
    ("Anyone else find it hard to keep houseplants and a cat in the same room?", LIFE),
    ("Fixed a squeaky door hinge {day} with a bit of soap. Small victories.", LIFE),
)
PEOPLE = ("my sister", "a coworker", "my neighbor", "an old friend", "my parents", "my partner", "my brother")
WHEN = ("this weekend", "on Saturday", "next Friday", "tonight", "on Sunday", "next week")
DAYS = ("yesterday", "last weekend", "this morning", "on Sunday", "last night", "over the holidays")
GENERIC_ASPECT = RubricAspect(
    aspect="A concrete suggestion with a next step",
    reason="The user wants something specific they can act on.",
    evidence="I also like having a concrete next step I can act on.",
)


@dataclass(frozen=True)
class SynthUser:
    """A user and the pole index (0 or 1) they hold on each dimension.

    Ids come in complementary twins, `synth<seed>-u<t>a` / `...b` (opposite pole everywhere):
    splitting by `twin_group` keeps held-out sets exactly balanced, so user-blind models sit
    at chance there too.
    """

    user_id: str
    prefs: dict[str, int]
    profile: tuple[ProfilePost, ...]
    post_dims: dict[str, str]  # post id -> the dimension it reveals ("" for neutral posts)

    def pole(self, dim: Dimension) -> Pole:
        return dim.poles[self.prefs[dim.name]]


def twin_group(user_id: str) -> str:
    """The twin pair a synthetic user belongs to (for `split_by_user(..., group=...)`)."""
    return user_id[:-1]


def _fill(template: str, rng: random.Random) -> str:
    person = rng.choice(PEOPLE)
    return template.format(person=person, Person=person[0].upper() + person[1:], when=rng.choice(WHEN),
                           day=rng.choice(DAYS))


def _dims(names: tuple[str, ...] | list[str] | None) -> tuple[Dimension, ...]:
    if not names:
        return DIMENSIONS
    known = {d.name: d for d in DIMENSIONS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PrbenchError(f"unknown synthetic dimension(s) {unknown} (known: {', '.join(known)})")
    return tuple(known[n] for n in names)


def _pole_vectors(n_users: int, n_dims: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Pole vectors in complementary twins (positions 2t, 2t+1), so every dimension is balanced
    (exactly, for even N).

    Vectors are distinct while N <= 2**n_dims; beyond that they repeat (many users, few
    preference types: the setting PAL assumes), each repeat with its own sampled posts.
    """
    codes = list(range(2 ** (n_dims - 1)))  # first bit 0; complements (first bit 1) never collide
    vectors: list[tuple[int, ...]] = []
    while len(vectors) < n_users:
        rng.shuffle(codes)
        for code in codes:
            v = tuple((code >> (n_dims - 1 - i)) & 1 for i in range(n_dims))
            vectors += [v, tuple(1 - b for b in v)]
    return vectors[:n_users]


def make_users(
    n_users: int = 48,
    *,
    seed: int = 0,
    dimensions: tuple[str, ...] | list[str] | None = None,
    posts_per_dim: int = 2,
    neutral_posts: int = 2,
) -> list[SynthUser]:
    """Users with distinct, balanced pole vectors and profiles that reveal every pole."""
    dims = _dims(dimensions)
    if not 1 <= posts_per_dim <= min(len(p.posts) for d in dims for p in d.poles):
        raise PrbenchError(f"posts_per_dim must be between 1 and 6, got {posts_per_dim}")
    rng = random.Random(f"synth-users:{seed}")
    users = []
    for u, vec in enumerate(_pole_vectors(n_users, len(dims), rng)):
        user_id = f"synth{seed}-u{u // 2:03d}{'ab'[u % 2]}"  # twins share all but the last letter
        texts: list[tuple[str, str, str]] = []
        for dim, bit in zip(dims, vec):
            for t in rng.sample(dim.poles[bit].posts, posts_per_dim):
                texts.append((_fill(t, rng), dim.category, dim.name))
        for t, cat in rng.sample(NEUTRAL_POSTS, min(neutral_posts, len(NEUTRAL_POSTS))):
            texts.append((_fill(t, rng), cat, ""))
        rng.shuffle(texts)
        profile = tuple(ProfilePost(id=f"{user_id}-p{k:02d}", category=cat, text=text)
                        for k, (text, cat, _) in enumerate(texts))
        post_dims = {p.id: name for p, (_, _, name) in zip(profile, texts)}
        users.append(SynthUser(user_id, {d.name: b for d, b in zip(dims, vec)}, profile, post_dims))
    return users


def _item(user: SynthUser, dim: Dimension, idx: int, rng: random.Random) -> Example:
    """One minimal pair: same question, skeleton, tip and slot index; only the pole differs."""
    mine, other = user.pole(dim), dim.poles[1 - user.prefs[dim.name]]
    question = _fill(rng.choice(dim.questions), rng)
    slot = rng.randrange(len(mine.picks))
    why = rng.randrange(len(mine.whys))
    skeleton, tip = rng.choice(SKELETONS), rng.choice(TIPS)

    def answer(pole: Pole) -> str:
        text = skeleton.format(pick=pole.picks[slot], why=pole.whys[why], tip=tip)
        return text[0].upper() + text[1:]

    narrative = (f"{mine.narrative} So when I ask this, I want a suggestion that fits that. "
                 f"{GENERIC_ASPECT.evidence}")
    aspects = [RubricAspect(aspect=mine.aspect, reason=mine.reason, evidence=mine.narrative), GENERIC_ASPECT]
    # `planted` is an extra field (the schema allows extras), so it goes in through a plain dict
    planted: dict[str, Any] = {"planted": {"dimension": dim.name, "chosen_pole": mine.name,
                                           "rejected_pole": other.name}}
    return Example(
        id=f"{user.user_id}-q{idx:03d}", question=question, profile=list(user.profile),
        rubric_aspects=aspects, narrative=narrative, category=dim.category, user_id=user.user_id,
        chosen=answer(mine), rejected=answer(other),
        **planted,
    )


def synth_examples(
    n_users: int = 48,
    items_per_user: int = 14,
    *,
    seed: int = 0,
    dimensions: tuple[str, ...] | list[str] | None = None,
    posts_per_dim: int = 2,
    neutral_posts: int = 2,
) -> list[Example]:
    """The synthetic benchmark: `items_per_user` minimal pairs per user, dimensions round-robin.

    Each user's items cycle through the dimensions in a user-specific shuffled order, so every
    preference is asked about about equally often (few-shot adaptation can see each of them).
    """
    dims = _dims(dimensions)
    users = make_users(n_users, seed=seed, dimensions=dimensions, posts_per_dim=posts_per_dim,
                       neutral_posts=neutral_posts)
    out: list[Example] = []
    for user in users:
        rng = random.Random(f"synth-items:{seed}:{user.user_id}")
        order = list(dims)
        rng.shuffle(order)
        for j in range(items_per_user):
            out.append(_item(user, order[j % len(order)], j, rng))
    return out
