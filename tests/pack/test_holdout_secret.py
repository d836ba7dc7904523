"""The holdout stays private even from whoever has the spec (issue 50, cause 5): salts come from a secret the
builder keeps, never from the spec's text, so a commitment cannot be opened by brute force with the spec; and no
holdout answer is a dev answer, or a sum or difference of dev answers of its measure, because questions that the
families' arithmetic links (one table's rows, one relationship) go to one split whole."""

from __future__ import annotations

import hashlib
import hmac
import json
import stat
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ROOT, SCHEMAS

from evalpack.build import build_pack
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import HOLDOUT_FILE, commitment, holdout_key_beside, load_questions
from evalpack.data.plan import plan_pack
from evalpack.pack.certify import pack_warnings
from evalpack.pack.holdout import derivable, derivable_in_pack
from evalpack.questions.derive import PreviousSplits, assign_splits, derive_selected
from evalpack.spec.reader import parse_spec

SECRET_ENV = "EVALPACK_HOLDOUT_SECRET"
TESTS = Path(__file__).resolve().parents[1]

# every example spec, with a holdout of a fifth where it declares none
EXAMPLES = {
    "retail": (SCHEMAS / "retail.yaml", None),
    "finance": (SCHEMAS / "finance.yaml", ("\nrotations: 3\n", "\nrotations: 3\nholdout: 0.2\n")),
    "retail_misata": (ROOT / "benchmarks" / "specs" / "retail_misata.yaml",
                      ("\nseed: 42\n", "\nseed: 42\nholdout: 0.2\n")),
    "cohorts": (TESTS / "specs" / "cohorts.yaml", ("\nanswers: shared\n", "\nanswers: shared\nholdout: 0.2\n")),
    "shop_joins": (TESTS / "specs" / "shop_joins.yaml", ("\nanswers: rotated\n", "\nanswers: rotated\nholdout: 0.2\n")),
}
BUILT = ("retail", "finance", "retail_misata")  # built whole here; the others are checked on their derivation


def _spec_text(name: str) -> str:
    path, edit = EXAMPLES[name]
    text = path.read_text(encoding="utf-8")
    if edit:
        assert edit[0] in text, (name, edit[0])
        text = text.replace(edit[0], edit[1], 1)
    assert "\nholdout: 0.2\n" in text
    return text


def _secret_file(folder: Path, value: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "holdout.secret"
    path.write_text(value + "\n", encoding="ascii")
    path.chmod(0o600)
    return path


SECRET = "6b1f" * 16  # 64 hex digits: the builder's secret in these builds
OTHER_SECRET = "0e9d" * 16


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Each example spec of BUILT built with one rotation and a holdout, with this module's secret."""
    tmp = tmp_path_factory.mktemp("secret")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, str(_secret_file(tmp / "keeper", SECRET)))
        for name in BUILT:
            spec = tmp / "specs" / f"{name}.yaml"
            spec.parent.mkdir(exist_ok=True)
            spec.write_text(_spec_text(name), encoding="utf-8")
            out[name] = build_pack(spec, tmp / "packs" / name, rotations=1).path
    return out


def _key_records(pack: Path) -> list[dict]:
    return [json.loads(line) for line in (holdout_key_beside(pack) / HOLDOUT_FILE).read_text().splitlines()]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- the salts


def test_a_salt_made_from_the_spec_opens_no_commitment(built):
    """The attack: the old rule made each salt from the spec's text, the seed and the question's key, so anyone
    with the spec (schemas/retail.yaml is public) could brute-force the small answers. Even given the true gold SQL
    and answer, a salt made that way opens not one commitment now, so no search over answers recovers anything."""
    pack = built["retail"]
    spec = (holdout_key_beside(pack) / "retail.yaml").read_text(encoding="utf-8")
    assert spec == (SCHEMAS / "retail.yaml").read_text(encoding="utf-8")
    public = {r["id"]: r for r in load_questions(pack)}
    held = _key_records(pack)
    assert len(held) >= 10
    opened = []
    for r in held:
        from_spec = hashlib.sha256("\x1f".join(("evalpack-holdout-salt", spec, "42", r["key"])).encode()).hexdigest()
        assert commitment(r, r["salt"]) == public[r["id"]]["commitment"]  # the key's own salt opens it
        if commitment(r, from_spec) == public[r["id"]]["commitment"]:
            opened.append(r["id"])
    assert opened == []


def test_salts_are_an_hmac_of_the_builders_secret_which_no_file_holds(built):
    """Each salt is HMAC-SHA256 of the builder's secret and the pack's name, seed and question key, as the
    manifest says; the secret is named there (where it is kept), its value is in no file of the pack or its key."""
    pack = built["retail"]
    for r in _key_records(pack):
        message = "\x1f".join(("evalpack-holdout-salt", "retail", "42", r["key"])).encode()
        assert r["salt"] == hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    for folder in (pack, holdout_key_beside(pack)):
        for name, data in _files(folder).items():
            assert SECRET.encode() not in data and bytes.fromhex(SECRET) not in data, name
    manifest = json.loads((pack / "manifest.json").read_text())
    rule = manifest["hashes"]["holdout_salt"]
    assert rule == manifest["splits"]["holdout_key"]["salt"]
    assert "HMAC-SHA256" in rule and SECRET_ENV in rule and "spec" in rule
    assert manifest["spec"]["text"] is None  # with a holdout the spec's text is not published either
    assert "holdout secret" in (holdout_key_beside(pack) / "README.md").read_text()


def test_the_same_secret_gives_the_same_bytes_and_another_secret_other_commitments(built, tmp_path, monkeypatch):
    """Same spec, seed and secret: the same pack, byte for byte, wherever it is built. The spec alone does not
    fix the commitments: another secret gives other ones, and nothing else changes in questions.jsonl."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    monkeypatch.setenv(SECRET_ENV, str(_secret_file(tmp_path / "keeper", SECRET)))
    same = build_pack(SCHEMAS / "retail.yaml", tmp_path / "same" / "retail", rotations=1).path
    first, again = _files(built["retail"]), _files(same)
    assert sorted(first) == sorted(again)
    assert [n for n in first if first[n] != again[n] and n != "attestation.intoto.json"] == []
    monkeypatch.setenv(SECRET_ENV, str(_secret_file(tmp_path / "other", OTHER_SECRET)))
    other = build_pack(SCHEMAS / "retail.yaml", tmp_path / "other" / "retail", rotations=1).path
    a, b = load_questions(same), load_questions(other)
    assert [r["id"] for r in a] == [r["id"] for r in b]
    held = [i for i, r in enumerate(a) if r["split"] == "holdout"]
    assert held and all(a[i]["commitment"] != b[i]["commitment"] for i in held)
    assert [{k: v for k, v in r.items() if k != "commitment"} for r in a] == \
        [{k: v for k, v in r.items() if k != "commitment"} for r in b]


def test_a_missing_secret_is_made_once_private_and_a_short_one_is_refused(tmp_path, monkeypatch):
    from evalpack.pack.holdout import holdout_secret

    path = tmp_path / "config" / "holdout.secret"
    monkeypatch.setenv(SECRET_ENV, str(path))
    made = holdout_secret()
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(made) == 64 and int(made, 16) >= 0 and holdout_secret() == made  # made once, then kept
    monkeypatch.delenv(SECRET_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert holdout_secret() != made and (tmp_path / "xdg" / "evalpack" / "holdout.secret").is_file()
    short = tmp_path / "short.secret"
    short.write_text("0123456789abcdef\n")
    monkeypatch.setenv(SECRET_ENV, str(short))
    with pytest.raises(EvalpackError, match="too short"):
        holdout_secret()


# --------------------------------------------------------------------------- derivable answers


def test_the_checker_finds_sums_differences_and_equal_answers():
    """The checker finds what the attacker found: a month that is its quarter minus the other two months, a total
    minus a part, an answer equal to a sibling's of any length; a long number shared with another measure; a
    table's row count minus the other parts. A number no such sum gives is not reported."""
    def q(qid, key, answer, split="dev"):
        return {"id": qid, "key": key, "split": split, "answerable": True, "expected_answer": answer}

    records = [
        q("q1", "curve_rows:orders:2025-01-01", 2862), q("q2", "curve_rows:orders:2025-03-01", 2829),
        q("q3", "quarter_count:orders:2025-01-01:3", 8728),
        q("h1", "curve_rows:orders:2025-02-01", 3037, "holdout"),  # = q3 - q1 - q2
        q("q4", "period_parents_without:orders.customer_id:2025-Q1", 400),
        q("h2", "period_parents_without:orders.customer_id:2025-Q3", 400, "holdout"),  # equal, 3 characters
        q("q5", "group_ranking:orders.amount:2025-01-01:1", [["web", 490000.19], ["app", 294000.11]]),
        q("h3", "group_total:orders.amount:store", 195999.99, "holdout"),  # nothing gives it
        q("h4", "group_month:orders.amount:web:2025-01-01", 490000.19, "holdout"),  # in a dev rows answer
        q("q6", "fk_nulls:orders.customer_id", 36),
        q("h5", "fk_orphans:orders.customer_id", 30, "holdout"),  # rows - linked - nulls
        q("q7", "fk_linked:orders.customer_id", 39934),
        q("h6", "segment_total:customers.tier:gold", 39934, "holdout"),  # another measure, 5 characters
    ]
    found = {d.question: d for d in derivable(records, {"orders": {"seed_42": 40000}})}
    assert sorted(found) == ["h1", "h2", "h4", "h5", "h6"]
    assert sorted(found["h1"].terms) == ["+ q3", "- q1", "- q2"]
    assert found["h2"].terms == ("+ q4",) and found["h4"].terms == ("+ q5 row 1",)
    assert sorted(found["h5"].terms) == ["+ rows:orders", "- q6", "- q7"]
    assert str(found["h1"]).startswith("h1 (curve_rows:orders:2025-02-01): its answer's 3037 is q3 - ")
    # rotated answers: each rotation on its own
    rotated = [q("q1", "curve_rows:t:1", {"seed_1": 5, "seed_2": 7}),
               q("q2", "curve_rows:t:2", {"seed_1": 6, "seed_2": 9}),
               q("h", "span_count:t:1", {"seed_1": 11, "seed_2": 17}, "holdout")]
    assert [(d.rotation, d.value) for d in derivable(rotated, rotated=True)] == [("seed_1", "11")]


def _split_unit(spec, key: str) -> str:
    """The group a question belongs to, as the split rule groups them: one table's rows, or one relationship."""
    measure = key.split(":")[1] if ":" in key else key
    links = {f"{r.child_table}.{r.child_column}" for r in spec.relationships}
    return measure if measure in links else measure.split(".")[0]


def _derived(name: str, rotations: int = 1):
    spec = parse_spec(_spec_text(name), file=f"{name}.yaml", rotations=rotations)
    plans = plan_pack(spec)
    return spec, plans, derive_selected(spec, plans)[0]


def _records(spec, questions) -> list[dict]:
    return [q.to_record(spec.answers) for q in questions]


def _rows(plans) -> dict[str, dict[str, int]]:
    return {name: {p.rotation: p.table(name).rows for p in plans} for name in (t.name for t in plans[0].tables)}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_linked_questions_share_a_split_and_no_holdout_answer_is_derivable(name):
    """On every example spec with a holdout: each group of linked questions is in one split, and no holdout
    answer is a dev answer or a sum or difference of up to three dev answers of its measure."""
    spec, plans, questions = _derived(name, rotations=2)
    splits = defaultdict(set)
    for q in questions:
        splits[_split_unit(spec, q.key)].add(q.split)
    assert {unit: s for unit, s in splits.items() if len(s) > 1} == {}
    found = derivable(_records(spec, questions), _rows(plans), rotated=spec.answers == "rotated")
    assert [str(d) for d in found] == []
    assert sum(q.split == "holdout" for q in questions) <= round(0.2 * len(questions))


@pytest.mark.parametrize("name", BUILT)
def test_a_built_pack_gives_no_holdout_answer_away(built, name):
    pack = built[name]
    assert [str(d) for d in derivable_in_pack(pack)] == []
    manifest = json.loads((pack / "manifest.json").read_text())
    records = load_questions(pack)
    held = sum(r["split"] == "holdout" for r in records)
    answerable = sum(r["answerable"] for r in records)
    target = round(0.2 * answerable)
    if name == "retail":
        assert held >= 10
    if held < target:
        assert [w for w in manifest["warnings"] if w.startswith("holdout: 0.2 asks for")], manifest["warnings"]
    assert "one table" in manifest["splits"]["rule"] and "5 characters" in manifest["splits"]["rule"]


def test_a_group_that_mixes_an_earlier_holdout_and_dev_question_keeps_both_and_holds_the_new_ones():
    """A version continued from one split by another rule: nothing leaves the holdout, no dev question is moved,
    the group's new questions go to the holdout (publishing them could give the held ones away), and the build's
    warnings name every holdout answer the dev ones give away."""
    spec, plans, questions = _derived("retail")
    rows = [q for q in questions if q.key.startswith(("curve_rows:", "quarter_count:"))]
    month, quarter = next(q for q in rows if q.key == "curve_rows:orders:2025-02-01"), \
        next(q for q in rows if q.key == "quarter_count:orders:2025-01-01:3")
    others = [q for q in rows if q.key in ("curve_rows:orders:2025-01-01", "curve_rows:orders:2025-03-01")]
    assert len(others) == 2
    earlier = tuple(q for q in questions if q.key != "curve_grand:orders.amount")  # a new question: the grand total
    previous = PreviousSplits("0.9.0", tuple((q.key, "holdout" if q is month else "dev") for q in earlier),
                              frozenset({month.key}))
    again = {q.key: q for q in assign_splits(spec, questions, previous)}
    assert again[month.key].split == "holdout" and again[quarter.key].split == "dev"
    assert all(again[q.key].split == "dev" for q in others)
    assert again["curve_grand:orders.amount"].split == "holdout"  # its table's group has a held question
    assert all(again[q.key].split == "dev" for q in earlier if q is not month)
    from evalpack.checks.verification import Observation, Verdict

    verdicts = tuple(Verdict(q, (Observation(plans[0].rotation, q.expected[0][1], ()),)) for q in again.values())
    warned = [w for w in pack_warnings(spec, plans, verdicts) if "gives away" in w or "give away" in w]
    assert any(month.id in w and quarter.id in w for w in warned), warned


def test_without_the_secret_the_spec_gives_no_salt(tmp_path, monkeypatch):
    """Two builders with the same spec and their own secrets get different salts for one question, and neither is
    the salt the spec's bytes used to give: the spec alone does not make a salt."""
    from evalpack.pack.holdout import salt
    from evalpack.spec.reader import load_spec

    spec = load_spec(SCHEMAS / "retail.yaml")
    key = "curve_rows:orders:2025-02-01"
    monkeypatch.setenv(SECRET_ENV, str(_secret_file(tmp_path / "a", SECRET)))
    mine = salt(spec, key)
    monkeypatch.setenv(SECRET_ENV, str(_secret_file(tmp_path / "b", OTHER_SECRET)))
    theirs = salt(spec, key)
    from_spec = hashlib.sha256("\x1f".join(("evalpack-holdout-salt", spec.source, "42", key)).encode()).hexdigest()
    assert mine != theirs and from_spec not in (mine, theirs)
