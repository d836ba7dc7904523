"""What the spec format accepts: names, types and their aliases, the keys and features it refuses by name, the
Hub's license identifiers, the distributions a column may draw from."""

from __future__ import annotations

import datetime as dt
import re

# matched with fullmatch: `$` alone lets a trailing newline through
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER_RE = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
PERIOD_RE = re.compile(r"^(\d{4})-(\d{2})$")
QUARTER_RE = re.compile(r"^(\d{4})-?[Qq]([1-4])$")
# `repo:` the Hub repo id, the rule of publish.layout.check_repo_id (copied: the engine imports no publish)
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
# `license:` the Hub's license identifiers, from huggingface/hub-docs docs/hub/repositories-licenses.md
# ("region licenses", commit 242f4a1e, 2026-08-22; https://huggingface.co/docs/hub/repositories-licenses)
HUB_LICENSES = (
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause",
    "bsd-3-clause-clear", "c-uda", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0", "cc-by-sa-3.0",
    "cc-by-sa-4.0", "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-3.0",
    "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0", "cdla-sharing-1.0",
    "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0", "etalab-2.0", "eupl-1.1",
    "eupl-1.2", "agpl-3.0", "gfdl", "gpl", "gpl-2.0", "gpl-3.0", "lgpl", "lgpl-2.1", "lgpl-3.0", "isc", "h-research",
    "intel-research", "lppl-1.3c", "ms-pl", "apple-ascl", "apple-amlr", "mpl-2.0", "odc-by", "odbl", "openmdw-1.0",
    "openmdw-1.1", "openrail++", "osl-3.0", "postgresql", "ofl-1.1", "ncsa", "unlicense", "zlib", "pddl", "lgpl-lr",
    "deepfloyd-if-license", "fair-noncommercial-research-license", "llama2", "llama3", "llama3.1", "llama3.2",
    "llama3.3", "llama4", "grok2-community", "gemma", "unknown", "other",
)

COLUMN_TYPES = ("int", "float", "text", "categorical", "boolean", "date", "datetime", "foreign_key")
TYPE_ALIASES = {"integer": "int", "number": "float", "string": "text", "bool": "boolean"}
TEXT_TYPE_ALIASES = {"email": "email", "uuid": "uuid"}  # Misata column types that are text kinds
# the text kinds evalpack.data.textgen draws (TEXT_TYPES), and Misata's other names for them (TEXT_TYPE_NAMES)
TEXT_TYPE_NAMES = {
    "phone_number": "phone", "job": "job_title", "zip": "postal_code", "zip_code": "postal_code",
    "postcode": "postal_code", **{prose: "sentence" for prose in (
        "description", "product_description", "bio", "caption", "review", "comment_body", "support_ticket",
        "email_body", "ticket_body", "resolution_notes", "transaction_memo", "text")},
    **{short: "title" for short in ("short_review_title", "ticket_subject", "research_project_name",
                                    "restaurant_name", "menu_item")},
}
TEXT_TYPES = ("name", "email", "company", "city", "word", "sentence", "uuid", "first_name", "last_name", "username",
              "phone", "url", "address", "country", "state", "job_title", "product_name", "postal_code", "title")

# Misata features evalpack refuses by name, rather than as unknown keys.
UNSUPPORTED_TOP = (
    "scd2", "stock_flows", "lifecycles", "graph_motifs", "retention", "missingness",
    "late_arrivals", "duplicates", "event_logs", "processes", "outliers", "typos", "bitemporal",
    "dag_edges", "closures", "degradations", "joint_distributions", "noise", "noise_config",
    "realism", "vocabularies", "preset", "generation_mode",
)
# Misata keys that shape only what no declared fact touches: evalpack reads them, does without them and says so
# in the build's warnings (the manifest's `warnings`), so that a Misata spec builds unchanged.
NOTED_TOP = {
    "domain": "Misata picks realistic value distributions for that business domain; evalpack's values follow each "
              "column's own declaration",
    "locale": "Misata localises names and money with it; evalpack's text is locale-free",
    "events": "Misata applies each scenario event (a modifier on the rows its condition selects) after drawing the "
              "rows; evalpack's rows follow the declarations alone, so no event changes them (declare an outcome "
              "or rate curve for a change that questions should measure)",
}
NOTED_CURVE = {
    "concentration": "Misata spreads a period's total over its rows with a Dirichlet of that concentration; evalpack "
                     "spreads it within the column's min and max itself, to the same exact total",
    "intra_period_pattern": "Misata leans a period's rows towards weekdays or weekends; evalpack spreads them over "
                            "the month, with rows on its first and last day so that a wrong bound shows",
    "pattern_type": "Misata shapes the months between the declared points by it (seasonal, growth, ...); evalpack "
                    "interpolates them linearly, and every declared point's month holds its target exactly",
}
UNSUPPORTED_TABLE = ("scd2", "correlations", "inline_data", "is_reference")
UNSUPPORTED_COLUMN = ("lambda", "formula", "pattern", "values", "rollup", "relative_to", "min_delta_days",
                      "max_delta_days")
# A plain int or float column's `distribution:` (Misata's shapes and parameter names), drawn within its min and
# max (evalpack.data.generate.draw_distribution); the parameters each shape reads.
DISTRIBUTIONS = {
    "uniform": (), "normal": ("mean", "std"), "lognormal": ("mu", "sigma", "mean", "std"),
    "exponential": ("scale",), "gamma": ("shape", "scale"), "beta": ("a", "b"), "pareto": ("alpha", "a", "scale"),
}
DISTRIBUTION_ALIASES = {"log_normal": "lognormal", "power_law": "pareto", "zipf": "pareto"}
DISTRIBUTION_KEYS = ("distribution", "mean", "std", "mu", "sigma", "scale", "shape", "alpha", "a", "b")
DEPENDENT_KEYS = ("depends_on", "mapping", "default")  # Misata's per-label values of a numeric column
UNSUPPORTED_COLUMN_TYPES = ("time", "json", "array", "object")
# What Misata does with a key evalpack refuses by name, and what to write instead (appended to the refusal).
MISATA_NOTES = {
    "preset": "Misata applies that use case's defaults (rows, dates, dirt); evalpack reads only what the spec "
              "declares; remove it and declare rows and dates on the tables",
    "lambda": "Misata draws an exponential of that rate; evalpack's exponential reads Misata's other name for it, "
              "`scale` (1/lambda); write scale: 1/lambda instead",
    "formula": "Misata computes the column from the row's other columns; evalpack draws each column from its own "
               "declaration; remove it and give the column min/max (a question can compute it in SQL)",
    "rollup": "Misata fills each row with an aggregate of its child rows in another table; evalpack does not derive "
              "a column from another table's rows; remove it (a question can ask for that aggregate with a join)",
    **{key: "Misata dates each row within that many days of its parent's date; evalpack draws a date between the "
            "column's start and end; remove relative_to, min_delta_days and max_delta_days and give start: and end:"
       for key in ("relative_to", "min_delta_days", "max_delta_days")},
}
# Misata's relationship options, each with what to write instead. The value that asks for nothing (false, 0,
# null, {} or []) is accepted, as it is what evalpack does anyway; any other is refused with this message
# ({child}: the foreign key, {parent_table}: the parent's table, {value}: the value written).
UNSUPPORTED_RELATIONSHIP = {
    "temporal": "evalpack does not keep a child's dates after its parent's (Misata's temporal constraint); "
                "remove it or write `temporal: false`",
    "temporal_constraint": "evalpack does not keep a child's dates after its parent's (Misata's temporal "
                           "constraint); remove it or write `temporal_constraint: false`",
    "parent_time": "evalpack does not choose parents by their time (Misata's temporal eligibility); remove it",
    "child_time": "evalpack does not choose parents by their time (Misata's temporal eligibility); remove it",
    "child_time_table": "evalpack does not choose parents by their time (Misata's temporal eligibility); remove it",
    "filters": "evalpack draws the parent of {child} from every row of {parent_table}, not from the rows a "
               "filter keeps; remove it or write `filters: {{}}`",
    "partition_by": "evalpack does not keep the parent of {child} within the child's {value}; remove it or write "
                    "`partition_by: []`",
}
# `min_children: N` on a relationship builds as per_parent `{child: <fk>, counts: {"N+": 1.0}}` (parse_spec).
# Misata's keys about a column's parent (`references`, `sampling`, `unique` on a foreign key, ...) are read by
# _fk_column_keys, each honoured or refused with what to write instead; `references` alone makes the column's
# relationship, as in Misata (parse_spec).
# Misata's constraint types other than balanced_ledger, each with what to write instead.
UNSUPPORTED_CONSTRAINT = {
    "sum_limit": "evalpack does not scale a group's values down to a limit (Misata's `sum_limit`); remove the "
                 "constraint, and bound the column with its `max:` instead",
    "max_per_group": "evalpack does not cap the rows of a group (Misata's `max_per_group`); remove the constraint "
                     "(per_parent declares how many children each parent has)",
    "min_per_group": "evalpack does not raise the rows of a group (Misata's `min_per_group`); remove the constraint "
                     "(per_parent declares how many children each parent has)",
    "unique_combination": "evalpack does not drop rows that repeat a combination of columns (Misata's "
                          "`unique_combination`); remove the constraint",
    "inequality": "evalpack does not order two columns of a row (Misata's `inequality`); remove the constraint and "
                  "give the columns ranges that do not overlap",
    "col_range": "evalpack does not bound a column by two others of its row (Misata's `col_range`); remove the "
                 "constraint and bound the column by constants with `min:` and `max:`",
    "when_then": "evalpack does not apply a rule on one column when another holds a value (Misata's `when_then`); "
                 "remove the constraint",
    "lte_parent": "evalpack does not bound a child's value by its parent's row (Misata's `lte_parent`); remove the "
                  "constraint, and bound the column by constants with its `min:` and `max:` instead",
    "sum_lte_parent": "evalpack does not bound the sum of a parent's children by the parent's row (Misata's "
                      "`sum_lte_parent`); remove the constraint: the column's `max:` times the most children a "
                      "parent has (per_parent's counts) bounds the sum instead",
}
CURVE_VALUE_KEYS = ("target_value", "value", "target", "amount")

# Limits. Each is far beyond an honest spec and small enough that a hostile or careless one is refused
# while it is read, before it costs minutes, gigabytes of memory or a disk full of rows (issue 17).
# README.md ("Limits") lists them; every refusal names the limit and what to do.
MAX_SPEC_BYTES = 1_000_000  # a spec file; the example specs are 2-3 KB
MAX_DEPTH = 20  # nested mappings and lists, counted after YAML aliases; a spec needs 6
MAX_ALIAS_VALUES = 100_000  # values YAML aliases may repeat in all (an alias bomb repeats billions)
MAX_NAME_LENGTH = 63  # a table or column name (and the pack name): PostgreSQL's identifier limit
MAX_TABLE_ROWS = 50_000_000  # rows of one table in one rotation
MAX_ROTATION_ROWS = 100_000_000  # rows of all tables of one rotation
MAX_NUMBER = 10**15  # the magnitude of any number read (ints are int64 in the pack; 10**15 < 2**53)
MAX_UNITS = 10**15  # an amount in units of its column's decimals: exact in int64 sums and float64
MAX_SEED = 2**32 - 1  # numpy's classic seed range
FIRST_DATE, LAST_DATE = dt.date(1900, 1, 1), dt.date(2200, 12, 31)  # any date or period
MAX_MONTHS = (LAST_DATE.year - FIRST_DATE.year + 1) * 12  # a curve point's `month:` index

# the keys each part of a spec may hold
TOP_KEYS = (
    "name", "version", "description", "license", "seed", "rotations", "answers", "holdout", "gate",
    "gate_margin", "rows", "tables", "relationships", "outcome_curves", "rate_curves", "group_shares",
    "waterfalls", "time_grids", "constraints", "semantics", "questions", "repo", "segment_shares", "per_parent",
    "exports", "traps", "near_miss",
)
GATE_POLICIES = ("block", "warn", "off")  # evalpack.pack.diff.POLICIES
NEAR_MISS_KEYS = ("gate", "margin")
NEAR_MISS_GATES = ("drop", "keep")  # evalpack.checks.nearmiss.gate
EXPORT_FORMATS = ("sqlite", "postgres", "bird", "spider")  # evalpack.interop.exports writes them
QUESTIONS_KEYS = ("families", "include", "exclude", "max", "difficulty", "unanswerable")
FAMILIES_KEYS = ("include", "exclude")
SEMANTICS_KEYS = ("tables", "columns", "measures", "currency", "synonyms", "terms", "conventions")
TABLE_KEYS = ("rows", "columns", "constraints", "description")
COLUMN_KEYS = (
    "type", "unique", "min", "max", "decimals", "nullable", "choices", "weights", "rate", "start",
    "end", "text_type", "description", "primary_key", "probabilities", "probability", "sampling", *DISTRIBUTION_KEYS,
    *DEPENDENT_KEYS,
)
BRANCH_KEYS = ("value", "min", "max", "decimals", *DISTRIBUTION_KEYS)
CONSTRAINT_KEYS = ("name", "type", "table", "group_by", "debit_column", "credit_column", "decimals", "description")
