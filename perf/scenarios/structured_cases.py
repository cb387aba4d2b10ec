"""Cases for the structured-output benchmark: tool-calling prompts and json_schema prompts.

Built from a few templates: a library of tools with different parameter schemas (each
with prompts that call for it) and a library of schemas (each with texts to turn into
JSON). Deterministic: the same cases every run.
"""

from __future__ import annotations

import json
from typing import Any


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_S = {"type": "string"}
_B = {"type": "boolean"}


def _int(lo: int | None = None, hi: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def _num(lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "number"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def _enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


UNITS = ("meter", "kilometer", "mile", "foot", "inch", "celsius", "fahrenheit", "kilogram", "pound")

# name -> (description, parameters, prompts)
TOOLS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "get_weather": (
        "Get the current weather for a city.",
        _obj({"city": _S, "unit": _enum("celsius", "fahrenheit"), "days": _int(1, 7)}, ["city"]),
        [
            "What's the weather in Paris right now?",
            "Will it rain in Tokyo over the next 3 days? Use fahrenheit.",
            "How warm is it in Cairo today, in celsius?",
            "Give me the 5 day forecast for Toronto.",
            "Is it snowing in Oslo?",
        ],
    ),
    "create_event": (
        "Create a calendar event.",
        _obj(
            {
                "title": _S,
                "date": _S,
                "start_hour": _int(0, 23),
                "duration_minutes": _int(15, 480),
                "all_day": _B,
                "attendees": {
                    "type": "array",
                    "items": _obj({"name": _S, "email": _S}, ["name"]),
                },
            },
            ["title", "date", "start_hour"],
        ),
        [
            "Schedule a team meeting on 2025-03-14 at 10 for one hour with Ana and Bo.",
            "Put 'Dentist' in my calendar for May 2nd at 3pm.",
            "Book a 30 minute call with Priya tomorrow at 9.",
            "Add my mother's birthday on 2025-08-21 as an all-day event.",
            "Create an event 'Project review' on Friday at 14:00 for 90 minutes.",
        ],
    ),
    "web_search": (
        "Search the web.",
        _obj(
            {
                "query": _S,
                "max_results": _int(1, 20),
                "safe_search": _B,
                "filters": {
                    "type": "object",
                    "properties": {"site": _S, "language": _enum("en", "de", "fr", "es")},
                },
            },
            ["query"],
        ),
        [
            "Search the web for the best hiking trails in Colorado.",
            "Find me 3 recent articles about quantum computing.",
            "Look up the history of the Eiffel Tower on wikipedia.org.",
            "Search for French recipes for ratatouille, in French.",
        ],
    ),
    "calculate": (
        "Evaluate a math expression.",
        _obj({"expression": _S, "precision": _int(0, 10)}, ["expression"]),
        [
            "What is 17 times 23?",
            "Compute the square root of 2 to 4 decimal places.",
            "Calculate (45 + 12) / 3.",
            "What is 2 to the power of 16?",
            "How much is 15% of 240?",
        ],
    ),
    "convert_units": (
        "Convert a value from one unit to another.",
        _obj(
            {"value": _num(), "from_unit": _enum(*UNITS), "to_unit": _enum(*UNITS)},
            ["value", "from_unit", "to_unit"],
        ),
        [
            "Convert 10 miles to kilometers.",
            "How many feet is 3 meters?",
            "What is 100 fahrenheit in celsius?",
            "Convert 5 kilograms to pounds.",
        ],
    ),
    "send_email": (
        "Send an email.",
        _obj(
            {
                "to": {"type": "array", "items": _S, "minItems": 1},
                "subject": _S,
                "body": _S,
                "priority": _enum("low", "normal", "high"),
            },
            ["to", "subject", "body"],
        ),
        [
            "Email bob@example.com that the report is ready.",
            "Send an urgent email to the team (team@corp.io) saying the server is down.",
            "Write to alice@example.org and carol@example.org to invite them to lunch.",
            "Send my landlord (landlord@rent.com) a note that the rent is paid.",
        ],
    ),
    "book_flight": (
        "Book a flight.",
        _obj(
            {
                "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "date": _S,
                "passengers": _int(1, 9),
                "cabin": _enum("economy", "premium", "business", "first"),
            },
            ["origin", "destination", "date"],
        ),
        [
            "Book me a flight from JFK to LHR on June 3rd.",
            "I need 2 business class seats from SFO to NRT next Monday.",
            "Fly from Berlin (BER) to Madrid (MAD) on 2025-09-10, economy.",
            "Get a flight for my family of four from ORD to MIA on December 20.",
        ],
    ),
    "set_timer": (
        "Set a countdown timer.",
        _obj({"seconds": _int(1, 86400), "label": _S}, ["seconds"]),
        [
            "Set a timer for 10 minutes for the pasta.",
            "Remind me in 45 seconds.",
            "Start a 2 hour timer called 'laundry'.",
            "Timer for 90 seconds please.",
        ],
    ),
    "translate_text": (
        "Translate text into another language.",
        _obj(
            {
                "text": _S,
                "target_language": _enum("en", "de", "fr", "es", "it", "ja"),
                "formal": _B,
            },
            ["text", "target_language"],
        ),
        [
            "Translate 'good morning' into German.",
            "How do you say 'thank you very much' in Japanese, formally?",
            "Translate 'where is the station?' to Spanish.",
            "Say 'I love this city' in Italian.",
        ],
    ),
    "get_stock_price": (
        "Get the latest price of a stock.",
        _obj({"symbol": _S, "exchange": _enum("NASDAQ", "NYSE", "LSE", "TSE")}, ["symbol"]),
        [
            "What is Apple's stock price?",
            "How is MSFT trading on NASDAQ today?",
            "Get me the price of Toyota on the Tokyo exchange.",
            "What's IBM trading at on the NYSE?",
        ],
    ),
    "add_todo": (
        "Add an item to the to-do list.",
        _obj(
            {
                "task": _S,
                "priority": _int(1, 5),
                "due": _obj({"date": _S, "time": _S}, ["date"]),
                "tags": {"type": "array", "items": _enum("home", "work", "errand", "health")},
            },
            ["task"],
        ),
        [
            "Add 'buy milk' to my to-do list for tomorrow.",
            "Remind me to renew my passport by 2025-07-01, high priority.",
            "Add a work task: finish the slides by Friday 5pm.",
            "Put 'book a doctor appointment' on my list, tag it health.",
        ],
    ),
    "find_restaurants": (
        "Find restaurants near a place.",
        _obj(
            {
                "location": _S,
                "cuisine": _S,
                "price_level": _int(1, 4),
                "open_now": _B,
                "min_rating": _num(0, 5),
            },
            ["location"],
        ),
        [
            "Find a cheap sushi place near Union Square that is open now.",
            "Any Italian restaurants in Rome rated above 4.5?",
            "Where can I get vegan food in Berlin Mitte?",
        ],
    ),
}

HERMES_SYSTEM = (
    "You are a function calling AI model. You are provided with function signatures "
    "within <tools></tools> XML tags. You may call one or more functions to assist with "
    "the user query. Don't make assumptions about what values to plug into functions. "
    "Here are the available tools: <tools>{tools}</tools>\n"
    "For each function call return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags as follows:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-dict>}}\n</tool_call>'
)


def tool_def(name: str, strict: bool = False) -> dict[str, Any]:
    description, parameters, _ = TOOLS[name]
    function: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def tool_cases() -> list[dict[str, Any]]:
    """One case per prompt: the target tool plus two others, and the messages.

    SmolLM2's chat template does not render `tools`, so the tools are described to the
    model in a Hermes-style system message (the same text on every server)."""
    names = list(TOOLS)
    cases = []
    for i, (target, (_, _, prompts)) in enumerate(TOOLS.items()):
        for j, prompt in enumerate(prompts):
            others = [names[(i + 1 + j) % len(names)], names[(i + 5 + 2 * j) % len(names)]]
            offered = [target, *dict.fromkeys(n for n in others if n != target)]
            offered = offered[(len(cases)) % len(offered) :] + offered[: len(cases) % len(offered)]
            listing = "\n".join(json.dumps(tool_def(n)["function"]) for n in offered)
            cases.append(
                {
                    "id": f"tool-{len(cases):02d}-{target}",
                    "target": target,
                    "tools": offered,
                    "messages": [
                        {"role": "system", "content": HERMES_SYSTEM.format(tools=listing)},
                        {"role": "user", "content": prompt},
                    ],
                }
            )
    return cases


# name -> (schema, texts)
SCHEMAS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "person": (
        _obj(
            {
                "name": _S,
                "age": _int(0, 130),
                "email": _S,
                "address": _obj({"street": _S, "city": _S, "zip": _S}, ["city"]),
                "is_member": _B,
            },
            ["name", "age", "address"],
        ),
        [
            "Maria Lopez, 34, lives at 12 Oak Street in Austin 78701 and is a member.",
            "John Smith is 58. He lives in Leeds. Email: john@smith.uk. Not a member.",
            "Create a profile for a 21 year old student called Kenji in Osaka.",
            "Our new customer Fatima (45) from Casablanca signed up for membership.",
            "Invent a fictional person who lives in Paris.",
        ],
    ),
    "order": (
        _obj(
            {
                "order_id": _S,
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {"sku": _S, "quantity": _int(1, 100), "unit_price": _num(0, 10000)},
                        ["sku", "quantity", "unit_price"],
                    ),
                },
                "express": _B,
            },
            ["order_id", "items"],
        ),
        [
            "Order A-17: 2 pencils at 0.50 each and one notebook at 3.20, express shipping.",
            "Order 9931 has 5 units of SKU X1 costing 12 dollars each.",
            "Make an order with three different fruits.",
            "Order B2: 1 laptop (1299.99), 2 mice (19.90 each). Standard shipping.",
            "Summarize this order: ten bottles of water at 1 dollar.",
        ],
    ),
    "sentiment": (
        _obj(
            {
                "label": _enum("positive", "negative", "neutral"),
                "confidence": _num(0, 1),
                "keywords": {"type": "array", "items": _S, "maxItems": 5},
            },
            ["label", "confidence"],
        ),
        [
            "The food was amazing and the staff were so kind!",
            "Terrible service, I waited an hour and left hungry.",
            "The package arrived on Tuesday.",
            "I'm not sure how I feel about the new update, some parts are good.",
            "Absolutely the worst movie I have seen this year.",
        ],
    ),
    "recipe": (
        _obj(
            {
                "title": _S,
                "servings": _int(1, 12),
                "minutes": _int(1, 600),
                "vegetarian": _B,
                "ingredients": {"type": "array", "items": _S, "minItems": 1},
                "difficulty": _enum("easy", "medium", "hard"),
            },
            ["title", "servings", "ingredients", "difficulty"],
        ),
        [
            "A simple pancake recipe for four people.",
            "Spaghetti carbonara, serves 2, takes 25 minutes.",
            "Give me a vegetarian curry recipe.",
            "How to make a hard-boiled egg.",
            "A beef stew that takes three hours.",
        ],
    ),
    "event": (
        _obj(
            {
                "title": _S,
                "start": _obj({"date": _S, "hour": _int(0, 23), "minute": _int(0, 59)}, ["date"]),
                "location": _obj({"venue": _S, "online": _B}, ["online"]),
                "capacity": _int(1, 100000),
            },
            ["title", "start", "location"],
        ),
        [
            "Jazz night at the Blue Room on 2025-05-03 at 20:30, 120 seats.",
            "Online webinar about Python testing, March 3rd at 4pm.",
            "The annual company picnic in Central Park on July 4th.",
            "A chess tournament for 64 players next Saturday at 10:00.",
            "Plan a birthday party.",
        ],
    ),
    "review": (
        _obj(
            {
                "book": _S,
                "author": _S,
                "rating": _int(1, 5),
                "genre": _enum("fiction", "non-fiction", "poetry", "science", "history"),
                "recommend": _B,
            },
            ["book", "rating", "genre", "recommend"],
        ),
        [
            "I loved 'Dune' by Frank Herbert, five stars, a sci-fi classic.",
            "Sapiens by Harari was interesting but long. 3 out of 5.",
            "The poems in 'Leaves of Grass' bored me. One star.",
            "Review a history book you like.",
            "A quick review of '1984'.",
        ],
    ),
    "location": (
        _obj(
            {"place": _S, "lat": _num(-90, 90), "lon": _num(-180, 180), "country_code": _S},
            ["place", "lat", "lon"],
        ),
        [
            "Where is the Eiffel Tower?",
            "Give the coordinates of Sydney Opera House.",
            "Mount Kilimanjaro location.",
            "Coordinates of the city of Buenos Aires.",
            "Where is Reykjavik?",
        ],
    ),
    "plan": (
        _obj(
            {
                "goal": _S,
                "steps": {
                    "type": "array",
                    "minItems": 2,
                    "items": _obj({"n": _int(1, 20), "action": _S, "done": _B}, ["n", "action"]),
                },
            },
            ["goal", "steps"],
        ),
        [
            "Plan how to repaint a bedroom.",
            "Steps to learn to ride a bike.",
            "How do I move to a new apartment?",
            "Make a plan for studying for an exam in a week.",
            "Steps to bake bread.",
        ],
    ),
    "ticket": (
        _obj(
            {
                "summary": _S,
                "severity": _enum("low", "medium", "high", "critical"),
                "component": _enum("frontend", "backend", "database", "network"),
                "reproducible": _B,
                "affected_users": _int(0, 1000000),
            },
            ["summary", "severity", "component"],
        ),
        [
            "The login page shows a blank screen for all users on Safari.",
            "Database backups failed last night, nobody noticed yet.",
            "The button color is slightly off on the settings page.",
            "API latency went up to 5 seconds for about 2000 users.",
            "Intermittent packet loss between the two data centers.",
        ],
    ),
    "measurement": (
        _obj(
            {
                "readings": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 6,
                    "items": _obj(
                        {
                            "sensor": _enum("temp", "humidity", "pressure"),
                            "value": _num(-100, 2000),
                        },
                        ["sensor", "value"],
                    ),
                },
                "ok": _B,
            },
            ["readings", "ok"],
        ),
        [
            "Temperature 21.5, humidity 40, pressure 1013. All fine.",
            "The temp sensor reads -4.2 and humidity is 88; alarm raised.",
            "Pressure dropped to 980.",
            "Record two readings: temp 30 and humidity 20.",
            "Sensors offline except temperature at 19.",
        ],
    ),
}


def schema_cases() -> list[dict[str, Any]]:
    cases = []
    for name, (schema, texts) in SCHEMAS.items():
        for text in texts:
            cases.append(
                {
                    "id": f"json-{len(cases):02d}-{name}",
                    "name": name,
                    "schema": schema,
                    "messages": [
                        {
                            "role": "user",
                            "content": f"Reply with a JSON {name} object for this: {text}",
                        }
                    ],
                }
            )
    return cases
