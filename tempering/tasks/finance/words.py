"""The words of the reports: company, segment and region names, and the sentences of their prose.

Prose is made of templated sentences drawn with the report's own RNG. It never uses the words
that the unanswerable questions search for (`ABSENT`): a report says nothing about its
employees, its share price or its customers' number, so a question about them has no answer in
it (the tests check that no report contains those words).
"""

from __future__ import annotations

import random

NAME_FIRST = ("Alder", "Bluewater", "Cobalt", "Granite", "Meridian", "Pinecrest", "Redwood", "Silverline", "Summit",
              "Tidewater", "Northwind", "Ironbridge", "Lakeshore", "Brightfield", "Kestrel", "Westmark", "Oakridge",
              "Crestline", "Stonegate", "Evergreen", "Highpoint", "Clearwater", "Foxglove", "Marlow", "Juniper")
NAME_SECOND = ("Industries", "Holdings", "Technologies", "Systems", "Group", "Corporation", "Dynamics", "Brands",
               "Instruments", "Partners")

SEGMENTS = ("Industrial Automation", "Medical Devices", "Enterprise Software", "Consumer Electronics",
            "Specialty Chemicals", "Aerospace Components", "Energy Services", "Water Technologies",
            "Packaging Solutions", "Logistics Services", "Semiconductors", "Diagnostics", "Building Products",
            "Food Ingredients", "Data Services", "Outdoor Equipment", "Precision Instruments", "Renewable Power",
            "Laboratory Services", "Security Systems", "Agricultural Products", "Automotive Parts",
            "Payment Processing", "Cloud Infrastructure", "Retail Brands", "Marine Systems", "Rail Equipment",
            "Filtration", "Optical Networks", "Home Appliances")

REGIONS_SHORT = ("Americas", "Europe, Middle East and Africa", "Asia Pacific")
REGIONS_LONG = ("United States", "Canada", "Mexico", "Brazil", "Rest of Latin America", "United Kingdom", "Germany",
                "France", "Italy", "Spain", "Benelux", "Nordic countries", "Middle East", "Africa", "India",
                "China", "Japan", "South Korea", "Southeast Asia", "Australia and New Zealand")

# Facts no report states: the unanswerable questions ask for them, and search for these words.
ABSENT = {
    "employees": "How many employees did the company have at the end of fiscal {year}?",
    "share price": "What was the company's closing share price on the last trading day of fiscal {year}?",
    "market capitalization": "What was the company's market capitalization at the end of fiscal {year}?",
    "chief executive": "What was the total compensation of the company's chief executive officer in fiscal {year}?",
    "backlog": "What was the company's order backlog at the end of fiscal {year}?",
    "greenhouse gas": "What were the company's greenhouse gas emissions in fiscal {year}, in tonnes?",
    "customers": "What was the number of customers of the company at the end of fiscal {year}?",
    "square feet": "How many square feet of manufacturing space did the company operate in fiscal {year}?",
}

_ADJ = ("volatile", "uncertain", "competitive", "changing", "demanding", "cyclical", "fragmented", "regulated")
_THINGS = ("raw material costs", "foreign exchange rates", "interest rates", "supply chain disruptions",
           "changes in trade policy", "cybersecurity incidents", "product liability claims", "new regulations",
           "pricing pressure", "the timing of large orders", "the integration of acquired businesses",
           "the availability of credit", "changes in tax law", "litigation", "weather events",
           "the loss of key suppliers", "technological change", "intellectual property disputes")
_EFFECTS = ("could reduce our margins", "may affect our results of operations", "could delay shipments",
            "may increase our costs", "could harm our reputation", "may reduce demand for our products",
            "could require additional investment", "may affect the value of our assets")
_ACTIONS = ("We monitor", "Management reviews", "The board of directors oversees", "We seek to mitigate",
            "We regularly assess", "Our risk committee evaluates")
_MARKETS = ("the markets we serve", "our industry", "our end markets", "the regions in which we operate")


def company_name(rng: random.Random) -> str:
    first, second = rng.choice(NAME_FIRST), rng.choice(NAME_SECOND)
    return f"{first} {second}" if second == "Corporation" else f"{first} {second}, Inc."


def risk_paragraph(rng: random.Random, topic: str) -> str:
    """One paragraph of a risk factor about `topic` (about 500 characters)."""
    a, b, c, d, e = rng.sample(_THINGS, 5)
    effects = rng.sample(_EFFECTS, 4)
    return " ".join((
        f"{topic[0].upper()}{topic[1:]} {effects[0]}.",
        f"Conditions in {rng.choice(_MARKETS)} are {rng.choice(_ADJ)}, and {a} {effects[1]}.",
        f"{rng.choice(_ACTIONS)} exposure to {b} and to {c}, but there can be no assurance "
        "that these measures will be effective.",
        f"In addition, {d} {effects[2]}, and {e} {effects[3]}.",
        f"{rng.choice(_ACTIONS)} these matters at least once a year.",
    ))


def risk_section(rng: random.Random, number: int, paragraphs: int) -> list[tuple[str, str]]:
    """A risk factor: its heading, then `paragraphs` paragraphs. -> [("heading", text), ("para", text), ...]"""
    topic = rng.choice(_THINGS)
    out = [("heading", f"Risk factor {number}: {topic[0].upper()}{topic[1:]}")]
    return out + [("para", risk_paragraph(rng, topic if i == 0 else rng.choice(_THINGS))) for i in range(paragraphs)]


BASIS = ("The consolidated financial statements include the accounts of the company and its subsidiaries; "
         "intercompany balances and transactions have been eliminated. They are prepared in accordance with "
         "generally accepted accounting principles, which require management to make estimates and assumptions "
         "that affect the amounts reported. Actual results could differ from those estimates. Figures in "
         "parentheses are negative. The fiscal year ends on December 31.")

POLICIES = (
    "Revenue is recognized when control of the promised goods or services transfers, in an amount that reflects "
    "the consideration the company expects to be entitled to.",
    "Inventories are stated at the lower of cost and net realizable value, cost being determined on a first-in, "
    "first-out basis.",
    "Property, plant and equipment is stated at cost less accumulated depreciation; depreciation is computed on "
    "a straight-line basis over the estimated useful lives of the assets.",
    "Goodwill is not amortized; it is tested for impairment at least annually at the level of the reporting "
    "segments.",
    "Intangible assets with finite lives are amortized on a straight-line basis over their estimated useful "
    "lives.",
)
