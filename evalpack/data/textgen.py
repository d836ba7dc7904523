"""Vectorised text values: names, emails, companies, cities, words, sentences, UUIDs, and the other kinds
Misata's specs name (phones, addresses, countries, job titles, product names, titles: evalpack.spec.reader.TEXT_TYPES).

Unique text values are pure functions of (stream, row index), so a child table can compute
the key of any parent row without the parent table in memory.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FIRST = ("Ada", "Bo", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lena", "Mio", "Nia", "Omar",
         "Pia", "Quin", "Rosa", "Sami", "Tess", "Uma", "Vik", "Wren", "Xia", "Yuri", "Zoe")
LAST = ("Abe", "Berg", "Costa", "Diaz", "Eng", "Fox", "Gray", "Hale", "Ito", "Jain", "Kerr", "Lund", "Moss", "Nair",
        "Ortiz", "Park", "Quist", "Reyes", "Sato", "Tran", "Ueda", "Vogel", "Ward", "Xu", "Young", "Zhang")
COMPANY = ("Acme", "Borealis", "Cinder", "Dynamo", "Ember", "Fathom", "Granite", "Helix", "Ion", "Juniper",
           "Kestrel", "Lumen", "Meridian", "Nimbus", "Orbit", "Pinnacle")
SUFFIX = ("Ltd", "Inc", "GmbH", "Labs", "Group", "Co")
CITY = ("Lisbon", "Oslo", "Lagos", "Lima", "Osaka", "Quito", "Perth", "Porto", "Tunis", "Turin", "Hanoi", "Kyoto",
        "Dakar", "Austin", "Leeds", "Lyon", "Malmo", "Split", "Cork", "Bergen")
WORDS = ("amber", "basin", "cedar", "delta", "ember", "fable", "grove", "harbor", "isle", "jade", "knoll", "lagoon",
         "meadow", "north", "orchard", "prairie", "quartz", "ridge", "summit", "tundra", "upland", "valley",
         "willow", "yarrow", "zephyr", "canyon", "brook", "dune", "fjord", "glade")
COUNTRY = ("Argentina", "Australia", "Brazil", "Canada", "Chile", "Denmark", "Egypt", "Finland", "France", "Germany",
           "Ghana", "India", "Ireland", "Italy", "Japan", "Kenya", "Mexico", "Netherlands", "Norway", "Peru",
           "Poland", "Portugal", "Singapore", "Spain", "Sweden", "Turkey", "United Kingdom", "United States",
           "Vietnam")
STATE = ("Alpine", "Bayside", "Central", "Coastal", "Eastern", "Highland", "Lakeside", "Midland", "Northern",
         "Riverside", "Southern", "Western")
JOB = ("Accountant", "Analyst", "Architect", "Consultant", "Designer", "Engineer", "Manager", "Nurse", "Pharmacist",
       "Recruiter", "Researcher", "Scientist", "Technician", "Teacher", "Writer")
LEVEL = ("Junior", "Senior", "Lead", "Principal", "Associate", "Chief")
ADJECTIVE = ("Classic", "Compact", "Deluxe", "Eco", "Essential", "Everyday", "Premium", "Pro", "Smart", "Ultra",
             "Vintage", "Wireless")
PRODUCT = ("Backpack", "Blender", "Camera", "Chair", "Desk", "Headphones", "Jacket", "Kettle", "Lamp", "Monitor",
           "Mug", "Notebook", "Sneakers", "Speaker", "Tent", "Watch")
STREET = ("Street", "Road", "Avenue", "Lane", "Way")
HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a fast, well-mixed hash of uint64 values."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x += np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _pick(words: tuple[str, ...], index: np.ndarray) -> pa.Array:
    return pc.take(pa.array(words), pa.array(index % len(words)))


def _digits(values: np.ndarray, width: int) -> pa.Array:
    """``values`` (below 10**width) as zero-padded decimal text."""
    return pc.utf8_lpad(pc.cast(pa.array(values), pa.string()), width, "0")


def _joined(parts: list[pa.Array], separator: str, suffix: pa.Array | None, suffix_separator: str = " ") -> pa.Array:
    text = pc.binary_join_element_wise(*parts, separator)
    return text if suffix is None else pc.binary_join_element_wise(text, suffix, suffix_separator)


def uuids(stream: int, rows: np.ndarray) -> pa.Array:
    """Version-4-shaped UUID strings, one per row index, from the stream's hash."""
    base = np.uint64(stream & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        hi = splitmix(rows.astype(np.uint64) + base)
        lo = splitmix(hi ^ np.uint64(0xD1B54A32D192ED03))
    raw = np.stack([hi, lo], axis=1).view(np.uint8).reshape(-1, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    nibbles = np.empty((len(rows), 32), dtype=np.uint8)
    nibbles[:, 0::2] = HEX[raw >> 4]
    nibbles[:, 1::2] = HEX[raw & 0x0F]
    out = np.full((len(rows), 36), ord("-"), dtype=np.uint8)
    for src, dst in ((slice(0, 8), slice(0, 8)), (slice(8, 12), slice(9, 13)), (slice(12, 16), slice(14, 18)),
                     (slice(16, 20), slice(19, 23)), (slice(20, 32), slice(24, 36))):
        out[:, dst] = nibbles[:, src]
    offsets = np.arange(0, 36 * len(rows) + 1, 36, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(rows), [None, pa.py_buffer(offsets), pa.py_buffer(out.tobytes())])


POOL = 4096


def text_values(kind: str, stream: int, rows: np.ndarray, unique: bool) -> pa.Array:
    """Text of ``kind`` for the given row indices; unique kinds carry the row index.

    Non-unique sentences come from a pool of 4,096 per stream: as varied as a reader needs,
    and cheap to make, store and compress at millions of rows.
    """
    if kind == "sentence" and not unique and len(rows) > POOL:
        pool = text_values(kind, stream, np.arange(POOL), False)
        picks = splitmix(rows.astype(np.uint64) + np.uint64((stream ^ 0x5EED) & 0xFFFFFFFFFFFFFFFF)) % np.uint64(POOL)
        return pc.take(pool, pa.array(picks.astype(np.int64)))
    if kind == "uuid":
        return uuids(stream, rows)
    h = splitmix(rows.astype(np.uint64) + np.uint64(stream & 0xFFFFFFFFFFFFFFFF))
    a = (h & np.uint64(0xFFFF)).astype(np.int64)
    b = ((h >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int64)
    c = ((h >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    suffix = pc.cast(pa.array(rows.astype(np.int64)), pa.string()) if unique else None
    if kind == "name":
        parts = [_pick(FIRST, a), _pick(LAST, b)] + ([suffix] if unique else [])
        return pc.binary_join_element_wise(*parts, " ")
    if kind == "email":
        local = pc.utf8_lower(pc.binary_join_element_wise(_pick(FIRST, a), _pick(LAST, b), "."))
        if unique:
            local = pc.binary_join_element_wise(local, suffix, "")
        return pc.binary_join_element_wise(local, pa.scalar("@example.com"), "")
    if kind == "company":
        return pc.binary_join_element_wise(*[_pick(COMPANY, a), _pick(SUFFIX, b)] + ([suffix] if unique else []), " ")
    if kind == "city":
        return _pick(CITY, a) if not unique else pc.binary_join_element_wise(_pick(CITY, a), suffix, " ")
    if kind == "word":
        return _pick(WORDS, a) if not unique else pc.binary_join_element_wise(_pick(WORDS, a), suffix, "_")
    if kind in ("first_name", "last_name", "country", "state", "product_name", "job_title"):
        pools = {"first_name": [FIRST], "last_name": [LAST], "country": [COUNTRY], "state": [STATE],
                 "product_name": [ADJECTIVE, PRODUCT], "job_title": [LEVEL, JOB]}[kind]
        return _joined([_pick(pool, x) for pool, x in zip(pools, (a, b))], " ", suffix)
    if kind == "username":
        return _joined([pc.utf8_lower(_pick(FIRST, a)), pc.utf8_lower(_pick(WORDS, b)), _digits(c % 100, 2)], "_",
                       suffix, "")
    if kind == "phone":
        return _joined([pa.array(["+1-555"] * len(rows)), _digits(a % 1000, 3), _digits(b % 10000, 4)], "-", suffix,
                       " x")
    if kind == "url":
        host = _joined([_pick(WORDS, a), _pick(WORDS, b)], "", None)
        return _joined([pa.array(["https://www"] * len(rows)), host, pa.array(["example/"] * len(rows))], ".",
                       suffix, "")
    if kind == "address":
        street = _joined([pc.cast(pa.array(a % 999 + 1), pa.string()), pc.utf8_capitalize(_pick(WORDS, b)),
                          _pick(STREET, c)], " ", None)
        return _joined([street, _pick(CITY, a + c)], ", ", suffix, " #")
    if kind == "postal_code":
        return _digits(a * 10 % 100000 + b % 10, 5) if not unique else _joined([_digits(a % 100000, 5)], "", suffix, "-")
    if kind == "title":
        words = [pc.utf8_capitalize(_pick(WORDS, x)) for x in (a, b)]
        return _joined([_pick(ADJECTIVE, c), *words], " ", suffix)
    if kind == "sentence":
        d = ((h >> np.uint64(48)) & np.uint64(0xFFFF)).astype(np.int64)
        words = [_pick(WORDS, x) for x in (a, b, c, d, a + b, c + d)]
        sentence = pc.binary_join_element_wise(*words, " ")
        sentence = pc.binary_join_element_wise(pc.utf8_capitalize(sentence), pa.scalar("."), "")
        return sentence if not unique else pc.binary_join_element_wise(sentence, suffix, " #")
    raise ValueError(kind)
