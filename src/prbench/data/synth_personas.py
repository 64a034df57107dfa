"""Synthetic writing-persona users: a held-out check shaped like persona-conditioned preference data.

Why: planted *content* preferences (`synth_users`) are read from the topic of a profile post,
which a frozen sentence encoder sees directly. Persona data is harder: a user is known by *how*
they write, the profile posts are about other topics than the question, and chosen and rejected
answer the same question with the same advice, differing only in voice. Content dominates a
sentence embedding, so raw profile-response similarity is weak, and style shows in scattered
words, so BM25 overlap is only partly informative; a model has to learn which directions of the
text carry the persona.

Each user writes in one of four personas (scholar, coach, storyteller, analyst); every phrase
slot of every text is written in the user's persona with probability `1 - noise` and in a random
other persona otherwise, so some texts (and some users) are ambiguous. An item is one question
on one of 32 topics; chosen = the advice in the user's persona, rejected = the same advice
(same tips, same order) in another persona. The profile is `posts` earlier texts of the user
on other topics. Personas are balanced over users (exactly, for N divisible by 4), so a
user-blind model is at chance in expectation. Questions are distinct strings per
(topic, template), so splits can be question-disjoint (`question_group`). Deterministic.
"""

from __future__ import annotations

import random
from typing import Any

from prbench.errors import PrbenchError
from prbench.schema import Example, HistoryPair, ProfilePost, RubricAspect

PERSONAS = ("scholar", "coach", "storyteller", "analyst")
CATEGORY = "Lifestyle_and_Personal_Development"

# topic -> (noun phrase used in questions, four tips as verb phrases)
TOPICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sleep": ("sleeping better", ("keep the same bedtime every night", "dim the lights an hour before bed",
                                  "leave the phone outside the bedroom", "cut caffeine after lunch")),
    "budget": ("sticking to a budget", ("write down every purchase for a month", "set a weekly spending cap",
                                        "move savings out on payday", "review subscriptions each quarter")),
    "language": ("learning a new language", ("practise for fifteen minutes daily", "label objects around the house",
                                             "watch shows with subtitles", "find a conversation partner")),
    "garden": ("starting a vegetable garden", ("start with a small raised bed", "pick easy crops like lettuce",
                                               "water early in the morning", "add compost before planting")),
    "running": ("getting into running", ("begin with run-walk intervals", "increase distance slowly each week",
                                         "buy shoes fitted at a store", "rest a day between runs")),
    "interview": ("preparing for a job interview", ("research the company beforehand", "rehearse answers out loud",
                                                    "prepare two questions to ask", "plan the route the day before")),
    "speaking": ("public speaking", ("outline three main points", "practise in front of a friend",
                                     "slow down at the start", "pause instead of saying um")),
    "moving": ("moving to a new home", ("pack one room at a time", "label boxes by room",
                                        "book movers a month ahead", "keep essentials in one bag")),
    "guitar": ("learning the guitar", ("learn four basic chords first", "practise chord changes slowly",
                                       "play along with simple songs", "keep the guitar out of its case")),
    "remote": ("working from home", ("set up a dedicated desk", "keep regular working hours",
                                     "take a short walk at lunch", "close the laptop at a fixed time")),
    "reading": ("reading more books", ("carry a book everywhere", "read twenty pages before bed",
                                       "quit books you do not enjoy", "join a reading group")),
    "time": ("managing time", ("plan tomorrow the evening before", "group small tasks together",
                               "block focus time in the calendar", "say no to low-value meetings")),
    "packing": ("packing for a trip", ("make a checklist a week ahead", "roll clothes instead of folding",
                                       "pack one outfit per day", "keep liquids in one pouch")),
    "plants": ("keeping houseplants alive", ("check the light each plant needs", "water only when the soil is dry",
                                             "use pots with drainage holes", "wipe dust off the leaves")),
    "cooking": ("cooking at home more", ("plan meals for the week", "cook a big batch on Sunday",
                                         "keep a few staple sauces", "learn five reliable recipes")),
    "saving": ("saving energy at home", ("switch to LED bulbs", "lower the thermostat a degree",
                                         "unplug chargers when not in use", "wash clothes in cold water")),
    "focus": ("staying focused", ("work in twenty-five minute blocks", "silence notifications",
                                  "keep one tab open at a time", "write the next step on paper")),
    "friends": ("making new friends", ("join a weekly club", "say yes to invitations",
                                       "follow up after meeting someone", "host a small dinner")),
    "cycling": ("commuting by bike", ("plan a quiet route", "get bright front and rear lights",
                                      "carry a small repair kit", "leave ten minutes early")),
    "writing": ("writing every day", ("write at the same time daily", "set a small word goal",
                                      "edit only the next morning", "keep a list of ideas")),
    "stress": ("handling stress", ("breathe slowly for two minutes", "walk outside every day",
                                   "write worries down at night", "talk to someone you trust")),
    "kids": ("getting kids to eat vegetables", ("serve one new vegetable at a time", "let them help cook",
                                                "offer dips with raw vegetables", "eat the vegetables yourself")),
    "coffee": ("brewing better coffee", ("grind the beans just before brewing", "weigh coffee and water",
                                         "use water just off the boil", "clean the grinder monthly")),
    "photo": ("taking better photos", ("shoot in soft morning light", "follow the rule of thirds",
                                       "get closer to the subject", "clean the lens first")),
    "car": ("buying a used car", ("check the service history", "have a mechanic inspect it",
                                  "test drive on the highway", "compare prices for the model")),
    "swim": ("learning to swim as an adult", ("take lessons with an instructor", "practise floating first",
                                              "use a kickboard for legs", "swim short lengths often")),
    "chess": ("getting better at chess", ("solve a few puzzles daily", "review your lost games",
                                          "learn one opening well", "play longer time controls")),
    "decluttering": ("decluttering a home", ("start with one drawer", "keep a donation box by the door",
                                             "touch each item once", "set a timer for twenty minutes")),
    "hiking": ("planning a first hike", ("pick a short marked trail", "check the weather the night before",
                                         "bring more water than you think", "tell someone your route")),
    "baking": ("baking bread", ("weigh the flour", "let the dough rise somewhere warm",
                                "bake with a tray of water for steam", "let the loaf cool before slicing")),
    "meditation": ("starting meditation", ("sit for five minutes a day", "focus on the breath",
                                           "use a short guided recording", "meditate at the same time daily")),
    "painting": ("learning to paint", ("start with three colours", "paint small studies",
                                       "copy a painting you admire", "paint from life once a week")),
}

QUESTIONS = (
    "Any advice on {topic}?",
    "What is the best way to get started with {topic}?",
    "I keep failing at {topic}. What should I do differently?",
)

# Per persona: openers, how a tip is voiced, connectors, closers, post frames (profile texts).
STYLE: dict[str, dict[str, tuple[str, ...]]] = {
    "scholar": {
        "open": ("The evidence on this question is fairly consistent.", "Research on {topic} suggests a measured approach.",
                 "It is worth considering what the literature indicates.", "Several studies offer useful guidance here.",
                 "A careful reading of the evidence points in one direction."),
        "tip": ("it is advisable to {tip}", "studies indicate that it helps to {tip}",
                "one might reasonably {tip}", "the findings favour those who {tip}"),
        "join": ("Moreover,", "Furthermore,", "In addition,", "Consequently,"),
        "close": ("Further reading may refine these conclusions.", "These findings, while preliminary, are instructive.",
                  "Naturally, individual circumstances vary.", "The literature on this remains an active area of inquiry."),
        "post": ("I have been reviewing the literature on {topic}; the findings are more nuanced than expected.",
                 "A recent study on {topic} caught my attention, although its methodology is debatable.",
                 "Reflecting on {topic}, I suspect the conventional wisdom lacks empirical support.",
                 "My notes on {topic} now span several pages of references and caveats.",
                 "It is remarkable how little rigorous evidence exists regarding {topic}."),
    },
    "coach": {
        "open": ("You've totally got this!", "Let's go, this is so doable!", "Great question, let's crush it!",
                 "Okay, love this goal!", "Yes! Time to make it happen!"),
        "tip": ("just {tip}", "go ahead and {tip}", "push yourself to {tip}", "commit to it and {tip}"),
        "join": ("Next up,", "And hey,", "Then,", "Plus,"),
        "close": ("Keep pushing and you'll see results fast!", "No excuses, you can do this!",
                  "Start today and celebrate every win!", "Believe in yourself and keep going!"),
        "post": ("Crushed my goals on {topic} this week, so pumped!", "Who's with me? Day ten of {topic} and still going strong!",
                 "No excuses today: {topic}, done, and I feel amazing!", "Big shout-out to everyone grinding on {topic}, keep it up!",
                 "Small wins add up! Showed up for {topic} again today!"),
    },
    "storyteller": {
        "open": ("I remember the first time I tried this myself.", "Years ago, a friend told me a story about {topic}.",
                 "Picture a quiet evening, and you wondering where to begin.", "It reminds me of a winter long ago.",
                 "Let me tell you how it went for me."),
        "tip": ("what changed everything was learning to {tip}", "one day I decided to {tip}, and it felt like magic",
                "my grandmother always said to {tip}", "the turning point came when I began to {tip}"),
        "join": ("Later that season,", "Slowly, like the tide,", "Then one morning,", "Before long,"),
        "close": ("It felt like a door quietly opening.", "Looking back, it was the start of a small adventure.",
                  "Somehow the whole story still makes me smile.", "And that, in the end, made all the difference."),
        "post": ("The smell of rain on the porch took me back to my first try at {topic}.",
                 "Once upon a time I was hopeless at {topic}; the story of how that changed is a long one.",
                 "Last autumn, under a copper sky, I finally made peace with {topic}.",
                 "My grandfather's old notebook had a page about {topic}, written in faded ink.",
                 "There is a little tale behind my love of {topic}, and it begins in a tiny kitchen."),
    },
    "analyst": {
        "open": ("Short answer: a few concrete steps.", "Bottom line: focus on the highest-impact actions.",
                 "Here is the efficient approach, in order.", "Key takeaway: measure first, then adjust.",
                 "Three priorities cover most of the value."),
        "tip": ("step one, {tip}", "the main lever is to {tip}", "priority: {tip}", "the data says to {tip}"),
        "join": ("Second,", "Next,", "Then,", "Finally,"),
        "close": ("Track the metric weekly and iterate.", "Expect roughly a twenty percent improvement within a month.",
                  "Review the numbers after thirty days.", "Optimise the process once the baseline is clear."),
        "post": ("Ran the numbers on {topic}: a two-step change cut my costs by eighteen percent.",
                 "Quick data point on {topic}: tracking it weekly doubled my consistency.",
                 "Spreadsheet update for {topic}: three metrics, all trending up this quarter.",
                 "Efficiency check on {topic}: most of the gain comes from one step.",
                 "Benchmarked my routine for {topic}; the results were clear after thirty days."),
    },
}


def question_group(question: str) -> str:
    """The topic a question is about: questions of one topic must not be split across parts."""
    for name, (phrase, _) in TOPICS.items():
        if phrase in question:
            return name
    return question


def _pick(rng: random.Random, persona: str, slot: str, noise: float) -> str:
    """A phrase for `slot`, in `persona` with probability 1 - noise, else in a random other persona."""
    if rng.random() < noise:
        persona = rng.choice([p for p in PERSONAS if p != persona])
    return rng.choice(STYLE[persona][slot])


def _answer(persona: str, topic: str, tips: list[str], rng: random.Random, noise: float) -> str:
    phrase = TOPICS[topic][0]
    parts = [_pick(rng, persona, "open", noise).format(topic=phrase)]
    for i, tip in enumerate(tips):
        voiced = _pick(rng, persona, "tip", noise).format(tip=tip)
        lead = _pick(rng, persona, "join", noise) + " " if i else ""
        sentence = lead + voiced
        parts.append(sentence[0].upper() + sentence[1:] + ".")
    parts.append(_pick(rng, persona, "close", noise))
    return " ".join(parts)


def _post(persona: str, topic: str, rng: random.Random, noise: float) -> str:
    """A styled frame plus one plain tip of the topic: content shares the embedding with style."""
    phrase, tips = TOPICS[topic]
    text = _pick(rng, persona, "post", noise).format(topic=phrase)
    tip = rng.choice(tips)
    return f"{text[0].upper()}{text[1:]} {tip[0].upper()}{tip[1:]}."


def synth_persona_examples(
    n_users: int = 52,
    items_per_user: int = 12,
    *,
    seed: int = 0,
    posts: int = 20,
    noise: float = 0.35,
    tips_per_answer: int = 3,
    history: int = 0,
) -> list[Example]:
    """Persona-conditioned pairs: `items_per_user` questions per user, each on a different topic.

    `history` > 0: each pair also carries up to that many of the user's earlier pairs (the ones
    before it, with `time` = the item's rank), for the `history` conditions.
    """
    if not 0.0 <= noise < 0.75:
        raise PrbenchError(f"noise must be in [0, 0.75) (at 0.75 a text says nothing of its persona), got {noise}")
    if not 1 <= items_per_user <= len(TOPICS):
        raise PrbenchError(f"items_per_user must be between 1 and {len(TOPICS)}, got {items_per_user}")
    if history < 0:
        raise PrbenchError(f"history must be >= 0, got {history}")
    if not 1 <= tips_per_answer <= 4:
        raise PrbenchError(f"tips_per_answer must be between 1 and 4, got {tips_per_answer}")
    rng = random.Random(f"synth-personas:{seed}")
    order = [PERSONAS[i % len(PERSONAS)] for i in range(n_users)]
    rng.shuffle(order)
    names = sorted(TOPICS)
    out: list[Example] = []
    for u, persona in enumerate(order):
        user_id = f"persona{seed}-u{u:03d}"
        urng = random.Random(f"synth-personas:{seed}:{user_id}")
        profile = [ProfilePost(id=f"{user_id}-p{j:02d}", category=CATEGORY,
                               text=_post(persona, urng.choice(names), urng, noise)) for j in range(posts)]
        aspect = RubricAspect(aspect=f"Written in the {persona} voice",
                              reason=f"The user writes as a {persona} and prefers answers that do too.",
                              evidence=f"I write like a {persona}.")
        earlier: list[HistoryPair] = []
        for j, topic in enumerate(urng.sample(names, items_per_user)):
            phrase, tips = TOPICS[topic]
            question = urng.choice(QUESTIONS).format(topic=phrase)
            chosen_tips = urng.sample(list(tips), tips_per_answer)
            other = urng.choice([p for p in PERSONAS if p != persona])
            chosen = _answer(persona, topic, chosen_tips, urng, noise)
            rejected = _answer(other, topic, chosen_tips, urng, noise)
            # `planted` is an extra field (the schema allows extras), so it goes in through a plain dict
            extra: dict[str, Any] = {"planted": {"persona": persona, "rejected_persona": other, "topic": topic}}
            if history:
                extra.update(time=f"{j:03d}", history=earlier[-history:])
            out.append(Example(
                id=f"{user_id}-q{j:03d}", question=question, profile=profile, rubric_aspects=[aspect],
                narrative=f"I write like a {persona}. So when I ask this, I want an answer in that voice.",
                category=CATEGORY, user_id=user_id, chosen=chosen, rejected=rejected,
                **extra,
            ))
            if history:
                earlier.append(HistoryPair(id=f"{user_id}-q{j:03d}", prompt=question, chosen=chosen, rejected=rejected,
                                           time=f"{j:03d}"))
    return out
