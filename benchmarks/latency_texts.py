"""Synthetic memory for the latency benchmark: facts, events and questions.

Everything is generated from templates and word lists in this file (no
download). Generation is deterministic and prefix-stable: item i depends only
on the random seed and on items before it, so the first 1,000 facts of a 10,000-fact
corpus are the 1,000 facts of a 1,000-fact corpus (and their cached
embeddings serve both).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

FIRST = [
    "Maya",
    "Omar",
    "Priya",
    "Lukas",
    "Sofia",
    "Kenji",
    "Amara",
    "Diego",
    "Elena",
    "Tomasz",
    "Aisha",
    "Jonas",
    "Chloe",
    "Ravi",
    "Ingrid",
    "Mateo",
    "Yuki",
    "Fatima",
    "Noah",
    "Leila",
    "Samuel",
    "Hana",
    "Viktor",
    "Zara",
    "Felix",
    "Nadia",
    "Arjun",
    "Greta",
    "Kwame",
    "Lucia",
    "Emeka",
    "Freya",
    "Hugo",
    "Mei",
    "Tariq",
    "Anouk",
    "Pablo",
    "Sigrid",
    "Dmitri",
    "Ines",
    "Caleb",
    "Rosa",
    "Malik",
    "Astrid",
    "Jun",
    "Beatriz",
    "Oskar",
    "Layla",
    "Rafael",
    "Nia",
    "Henrik",
    "Selin",
    "Marco",
    "Esther",
    "Idris",
    "Clara",
    "Tobias",
    "Ayumi",
    "Gabriel",
    "Wanjiru",
]
LAST = [
    "Okafor",
    "Lindqvist",
    "Haddad",
    "Moreau",
    "Tanaka",
    "Novak",
    "Fernandes",
    "Schmidt",
    "Kowalski",
    "Mensah",
    "Rossi",
    "Nakamura",
    "Petrov",
    "Costa",
    "Andersen",
    "Bauer",
    "Kaur",
    "Dubois",
    "Yilmaz",
    "Silva",
    "Park",
    "Jensen",
    "Ibrahim",
    "Garcia",
    "Müller",
    "Sato",
    "Hughes",
    "Varga",
    "Osei",
    "Larsen",
]
CITIES = [
    "Lisbon",
    "Nairobi",
    "Osaka",
    "Toronto",
    "Kraków",
    "Valparaíso",
    "Reykjavik",
    "Marseille",
    "Bangalore",
    "Melbourne",
    "Montreal",
    "Seville",
    "Tallinn",
    "Accra",
    "Busan",
    "Porto",
    "Edinburgh",
    "Ljubljana",
    "Hanoi",
    "Cape Town",
    "Bogotá",
    "Vienna",
    "Istanbul",
    "Copenhagen",
    "Kyoto",
    "Lyon",
    "Dublin",
    "Helsinki",
    "Zagreb",
    "Rotterdam",
    "Austin",
    "Denver",
    "Quito",
    "Tbilisi",
    "Bergen",
    "Naples",
    "Antwerp",
    "Chiang Mai",
    "Lagos",
    "Santiago",
]
ORGS = [
    "Northwind",
    "Bluefin Labs",
    "Corvid Analytics",
    "Harbor & Finch",
    "Meridian Health",
    "Quarry Robotics",
    "Saltmarsh Media",
    "Tessellate",
    "Ironbark Logistics",
    "Lumen Bank",
    "Pinecrest School",
    "Vela Energy",
    "Kestrel Airlines",
    "Orchard Foods",
    "Atlas Insurance",
    "Brightline Legal",
    "Cobalt Games",
    "Driftwood Hotels",
    "Evergreen Clinic",
    "Fjord Shipping",
]
ROLES = [
    "product designer",
    "data engineer",
    "nurse",
    "account manager",
    "teacher",
    "backend developer",
    "head of finance",
    "research scientist",
    "site reliability engineer",
    "marketing lead",
    "pharmacist",
    "project manager",
    "architect",
    "UX researcher",
    "sales director",
    "legal counsel",
]
TOPICS = [
    "the quarterly budget review",
    "the kitchen renovation",
    "the marathon training plan",
    "the visa application",
    "the onboarding of new hires",
    "the database migration",
    "the wedding guest list",
    "the summer offsite",
    "the mortgage refinancing",
    "the conference talk",
    "the product launch",
    "the tax return",
    "the garden redesign",
    "the hiring plan for the platform team",
    "the move to a new apartment",
    "the security audit",
    "the school enrolment",
    "the holiday schedule",
    "the customer churn analysis",
    "the car insurance renewal",
    "the pricing experiment",
    "the dentist appointment",
    "the book club reading list",
    "the fundraising deck",
    "the office lease",
    "the API deprecation",
    "the piano lessons",
    "the vet visit",
    "the language exchange",
    "the hackathon",
    "the performance review",
    "the grant proposal",
    "the bathroom leak",
    "the photography course",
    "the board meeting",
    "the incident postmortem",
    "the cycling trip",
    "the podcast episode",
    "the data retention policy",
    "the birthday party",
]
FOODS = [
    "ramen",
    "paella",
    "jollof rice",
    "pierogi",
    "pho",
    "shakshuka",
    "bibimbap",
    "tacos al pastor",
    "risotto",
    "falafel",
    "sushi",
    "goulash",
    "dal makhani",
    "empanadas",
    "moussaka",
    "laksa",
    "ceviche",
    "injera with lentils",
]
ALLERGENS = ["peanuts", "shellfish", "gluten", "lactose", "sesame", "tree nuts", "eggs", "soy", "penicillin", "cats"]
LANGUAGES = [
    "Portuguese",
    "Japanese",
    "French",
    "German",
    "Spanish",
    "Swahili",
    "Korean",
    "Polish",
    "Italian",
    "Dutch",
    "Turkish",
    "Hindi",
    "Finnish",
    "Greek",
]
PROG_LANGS = ["Rust", "Go", "TypeScript", "Python", "Kotlin", "Elixir", "Swift", "Scala"]
HOBBIES = [
    "bouldering",
    "sourdough baking",
    "birdwatching",
    "chess",
    "salsa dancing",
    "woodworking",
    "trail running",
    "pottery",
    "sailing",
    "urban sketching",
    "beekeeping",
    "film photography",
    "kayaking",
    "knitting",
]
PETS = [
    ("dog", "Biscuit"),
    ("cat", "Miso"),
    ("dog", "Pepper"),
    ("parrot", "Kiwi"),
    ("cat", "Luna"),
    ("rabbit", "Clover"),
    ("dog", "Otto"),
    ("cat", "Sable"),
    ("tortoise", "Ziggy"),
    ("dog", "Juniper"),
]
PLACES = [
    "the train station",
    "a café near the river",
    "the coworking space",
    "the hospital",
    "the old library",
    "the airport lounge",
    "the climbing gym",
    "the farmers market",
    "the city hall",
    "a rooftop bar",
    "the community center",
    "the harbour",
    "the university campus",
    "the museum of modern art",
]
RESTAURANTS = [
    "Casa Amarela",
    "The Copper Pot",
    "Sakura Tei",
    "Mama Ngozi's",
    "Le Petit Zinc",
    "Trattoria Fiore",
    "Green Lantern",
    "El Fogón",
    "Bao House",
    "The Salt Room",
    "Kafé Nord",
    "Spice Route",
]
PROJECTS = [
    "Project Heron",
    "Atlas v2",
    "the Falcon rewrite",
    "Project Tidewater",
    "the Orion dashboard",
    "Project Juniper",
    "the Beacon app",
    "Project Saffron",
    "the Cascade pipeline",
    "Project Lodestar",
    "the Ember redesign",
    "Project Meadow",
]
STATUSES = ["on track", "blocked", "at risk", "delayed by two weeks", "shipped", "paused", "in review"]
REASONS = [
    "the supplier was late",
    "a key engineer is on leave",
    "the budget was not approved yet",
    "the legal review took longer",
    "the weather closed the roads",
    "the client changed the scope",
    "the test results came back inconclusive",
    "the landlord has not answered",
    "a flight was cancelled",
]
DOCUMENTS = [
    "passport",
    "driving licence",
    "residence permit",
    "health insurance card",
    "gym membership",
    "library card",
    "work permit",
]
PURPOSES = [
    "a client workshop",
    "a family wedding",
    "a conference",
    "a hiking holiday",
    "a job interview",
    "a research visit",
    "a friend's graduation",
]
FEELINGS = ["relieved", "worried", "excited", "frustrated", "optimistic", "exhausted", "proud", "unsure"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
SPEAKERS = ["user", "user", "user", "assistant"]
CHANNELS = ["invoices", "meetings", "emails", "contracts", "support tickets"]
BECAUSE = ["it is fast", "the team knows it", "the client asked for it", "hiring is easier"]
WEEKDAYS = ["Monday", "Wednesday", "Friday", "Sunday"]
WENT = ["well", "badly", "long", "sideways"]
GIFTS = ["a book", "concert tickets", "a plant", "a cooking class"]

# The day every generated date counts back from: recent enough for recency to matter.
EPOCH = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _date(rng: random.Random, days_back: int = 730) -> datetime:
    return EPOCH - timedelta(days=rng.randint(0, days_back), minutes=rng.randint(0, 1439))


def _spoken_date(d: datetime) -> str:
    return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"


def _iso(d: datetime) -> str:
    return d.date().isoformat()


def _full(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


@dataclass(frozen=True)
class FactSpec:
    predicate: str
    value: Any
    volatility: str
    confidence: float
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime


@dataclass(frozen=True)
class EventSpec:
    kind: str
    payload: dict[str, Any]
    occurred_at: datetime


def _fact_value(rng: random.Random) -> tuple[str, Any]:
    """(predicate, value): strings, objects and lists, so fact_text sees every shape."""
    n = rng.choice(FIRST)
    d = _date(rng, 900)
    kind = rng.randrange(16)
    if kind == 0:
        return "home_city", f"{rng.choice(CITIES)}, since {_spoken_date(d)}"
    if kind == 1:
        return "employer", {"company": rng.choice(ORGS), "role": rng.choice(ROLES), "since": _iso(d)}
    if kind == 2:
        return f"{_slug(n)}_favorite_food", f"{rng.choice(FOODS)} at {rng.choice(RESTAURANTS)} in {rng.choice(CITIES)}"
    if kind == 3:
        return f"{_slug(n)}_allergy", {
            "person": _full(rng),
            "allergen": rng.choice(ALLERGENS),
            "severity": rng.choice(["mild", "moderate", "severe"]),
        }
    if kind == 4:
        kind_, name = rng.choice(PETS)
        return "pet", {"kind": kind_, "name": name, "owner": _full(rng), "vet": f"{rng.choice(LAST)} Clinic"}
    if kind == 5:
        return (
            "hobby",
            f"{rng.choice(HOBBIES)} on {rng.choice(['weekends', 'Tuesday evenings', 'early mornings'])}"
            f" with {n} in {rng.choice(CITIES)}",
        )
    if kind == 6:
        return "colleague", {
            "name": _full(rng),
            "team": rng.choice(PROJECTS),
            "role": rng.choice(ROLES),
            "office": rng.choice(CITIES),
        }
    if kind == 7:
        return f"{_slug(rng.choice(PROJECTS))}_status", {
            "status": rng.choice(STATUSES),
            "owner": _full(rng),
            "deadline": _iso(d + timedelta(days=rng.randint(10, 200))),
        }
    if kind == 8:
        return "travel_plan", {
            "destination": rng.choice(CITIES),
            "date": _iso(d),
            "purpose": rng.choice(PURPOSES),
            "with": [_full(rng) for _ in range(rng.randint(1, 2))],
        }
    if kind == 9:
        return "appointment", f"{rng.choice(TOPICS)} with {_full(rng)} at {rng.choice(PLACES)} on {_spoken_date(d)}"
    if kind == 10:
        return "preferred_language", f"{rng.choice(LANGUAGES)} for {rng.choice(CHANNELS)} with {rng.choice(ORGS)}"
    if kind == 11:
        return f"{_slug(n)}_birthday", {"person": _full(rng), "date": _iso(d), "gift_idea": rng.choice(HOBBIES)}
    if kind == 12:
        return "tech_choice", f"{rng.choice(PROG_LANGS)} for {rng.choice(PROJECTS)} because {rng.choice(BECAUSE)}"
    if kind == 13:
        return (
            "goal",
            f"finish {rng.choice(TOPICS)} before {_spoken_date(d + timedelta(days=90))} and tell {_full(rng)}",
        )
    if kind == 14:
        return "contact", {
            "name": _full(rng),
            "city": rng.choice(CITIES),
            "org": rng.choice(ORGS),
            "met_at": rng.choice(PLACES),
        }
    return (
        "note",
        f"{n} felt {rng.choice(FEELINGS)} about {rng.choice(TOPICS)} after talking to {_full(rng)}"
        f" in {rng.choice(CITIES)}",
    )


def facts(seed: int = 7) -> Iterator[FactSpec]:
    """Distinct (predicate, value) facts, endlessly."""
    import orjson

    seen: set[bytes] = set()
    i = 0
    while True:
        rng = random.Random(f"fact-{seed}-{i}")
        i += 1
        predicate, value = _fact_value(rng)
        key = predicate.encode() + b"\x00" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        if key in seen:
            continue
        seen.add(key)
        r = rng.random()
        volatility = "STABLE" if r < 0.70 else "SLOW" if r < 0.90 else "VOLATILE" if r < 0.98 else "EPHEMERAL"
        valid_from = _date(rng)
        valid_to = valid_from + timedelta(days=rng.randint(1, 60)) if rng.random() < 0.03 else None
        recorded = valid_from + timedelta(minutes=rng.randint(0, 600))
        yield FactSpec(
            predicate, value, volatility, round(rng.uniform(0.6, 1.0), 2), valid_from, valid_to, min(recorded, EPOCH)
        )


def _event_text(rng: random.Random) -> str:
    n, m = rng.sample(FIRST, 2)
    d = _date(rng, 900)
    city, topic = rng.choice(CITIES), rng.choice(TOPICS)
    t = rng.randrange(18)
    if t == 0:
        return f"{n} said {topic} moved to {_spoken_date(d)} because {rng.choice(REASONS)}."
    if t == 1:
        return f"On {_spoken_date(d)}, {n} and {m} met at {rng.choice(PLACES)} in {city} to talk about {topic}."
    if t == 2:
        return (
            f"I need to remember that {n}'s flight to {city} leaves on {_spoken_date(d)} at "
            f"{rng.randint(5, 22)}:{rng.choice(['00', '15', '30', '45'])} for {rng.choice(PURPOSES)}."
        )
    if t == 3:
        return (
            f"{n} recommended {rng.choice(RESTAURANTS)} in {city}; the {rng.choice(FOODS)} there is the best "
            f"{m} has ever had."
        )
    if t == 4:
        return (
            f"Reminder: renew my {rng.choice(DOCUMENTS)} before {_spoken_date(d)}, {n} says the office in "
            f"{city} is slow in {MONTHS[(d.month + 1) % 12]}."
        )
    if t == 5:
        return (
            f"We decided to use {rng.choice(PROG_LANGS)} for the {rng.choice(PROJECTS)} prototype; {n} will "
            f"review it on {_spoken_date(d)}."
        )
    if t == 6:
        return f"{n} is allergic to {rng.choice(ALLERGENS)}, so the team dinner on {_spoken_date(d)} should avoid it."
    if t == 7:
        return (
            f"{n} finished the {rng.choice(['10 km', 'half marathon', 'marathon', 'trail 25 km'])} race in "
            f"{city} in {rng.randint(0, 4)} hours {rng.randint(0, 59)} minutes on {_spoken_date(d)}."
        )
    if t == 8:
        return (
            f"The budget for {rng.choice(PROJECTS)} was cut by {rng.randint(5, 40)} percent after the review "
            f"with {rng.choice(ORGS)} on {_spoken_date(d)}."
        )
    if t == 9:
        return (
            f"Can you help me plan {topic}? {n} thinks we should start in {MONTHS[d.month - 1]} and ask "
            f"{m} from {rng.choice(ORGS)} for advice."
        )
    if t == 10:
        return (
            f"{n} just started as a {rng.choice(ROLES)} at {rng.choice(ORGS)} in {city} and feels "
            f"{rng.choice(FEELINGS)} about it."
        )
    if t == 11:
        return (
            f"My {rng.choice(PETS)[0]} has a vet appointment on {_spoken_date(d)}; {n} offered to drive us to "
            f"the clinic in {city}."
        )
    if t == 12:
        return (
            f"{n} is learning {rng.choice(LANGUAGES)} with {m} every {rng.choice(WEEKDAYS)}"
            f" and wants to be fluent before the trip to {city}."
        )
    if t == 13:
        return (
            f"The meeting about {topic} with {rng.choice(ORGS)} went {rng.choice(WENT)};"
            f" {n} will send the notes by {_spoken_date(d)}."
        )
    if t == 14:
        return f"I took up {rng.choice(HOBBIES)} in {city} in {MONTHS[d.month - 1]} {d.year}, {n} got me into it."
    if t == 15:
        return (
            f"Status update: {rng.choice(PROJECTS)} is {rng.choice(STATUSES)}; {n} owns the next step and "
            f"{m} reviews it on {_spoken_date(d)}."
        )
    if t == 16:
        return (
            f"{n} moved from {city} to {rng.choice(CITIES)} in {MONTHS[d.month - 1]} and is looking for a "
            f"{rng.choice(HOBBIES)} club there."
        )
    return (
        f"Note to self: {n}'s birthday is on {MONTHS[d.month - 1]} {d.day}; get {rng.choice(GIFTS)}"
        f" and book {rng.choice(RESTAURANTS)}."
    )


def events(seed: int = 11) -> Iterator[EventSpec]:
    """Distinct conversational turns, endlessly."""
    seen: set[str] = set()
    i = 0
    while True:
        rng = random.Random(f"event-{seed}-{i}")
        i += 1
        text = _event_text(rng)
        speaker = rng.choice(SPEAKERS)
        if speaker == "assistant":
            text = f"Noted. {text}"
        if text in seen:
            continue
        seen.add(text)
        yield EventSpec("conversation.message", {"speaker": speaker, "text": text}, _date(rng))


_QUESTIONS = [
    "Where is {n} flying in {month}?",
    "What did {n} say about {topic}?",
    "When is the deadline for {project}?",
    "Which restaurant in {city} did {n} recommend?",
    "Is {n} allergic to anything I should know before dinner?",
    "What happened at the meeting with {org} about {topic}?",
    "Who is working on {project} with {n}?",
    "Which programming language did we choose for {project}?",
    "How did {n}'s race in {city} go?",
    "What are my plans for {month} {year}?",
    "When does my {document} expire?",
    "What does {n} do at {org}?",
    "Where did I meet {n} {last}?",
    "What is the status of {project} right now?",
    "When is {n}'s birthday and what gift should I get?",
    "Which language should emails to {org} be written in?",
    "Why was {topic} postponed?",
    "What hobby did I pick up in {city}?",
    "Who offered to drive me to the vet in {city}?",
    "How much was the budget of {project} cut?",
    "What do I know about {n}'s move to {city}?",
    "Remind me what {n} thinks about {topic}.",
    "Any notes about {food} places in {city}?",
    "What did we decide about {topic} in {month}?",
    "Who should review the notes from {topic}?",
    "Which trip is planned with {n} {last}?",
]


def questions(seed: int = 13) -> Iterator[str]:
    """Distinct natural questions, endlessly (no two identical)."""
    seen: set[str] = set()
    i = 0
    while True:
        rng = random.Random(f"question-{seed}-{i}")
        i += 1
        q = rng.choice(_QUESTIONS).format(
            n=rng.choice(FIRST),
            last=rng.choice(LAST),
            month=rng.choice(MONTHS),
            year=rng.choice([2025, 2026]),
            topic=rng.choice(TOPICS),
            project=rng.choice(PROJECTS),
            city=rng.choice(CITIES),
            org=rng.choice(ORGS),
            document=rng.choice(DOCUMENTS),
            food=rng.choice(FOODS),
        )
        if q in seen:
            continue
        seen.add(q)
        yield q
