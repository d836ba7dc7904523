"""Questions of a balanced ledger: how many entries do not balance, and the trial balance."""

from __future__ import annotations

from sqlglot import exp

from evalpack.data.plan import AnswerKey
from evalpack.questions import phrasing
from evalpack.questions.families.base import (
    Draft,
    Drafts,
    count_star,
    money,
    rounded,
    select_from,
    sum_of,
)
from evalpack.spec.model import Spec


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    out: Drafts = []
    sem = spec.semantics
    for led in key.ledgers:
        words = phrasing.Words(sem, led.table)
        inner = (exp.select(exp.column(led.group_column)).from_(led.table).group_by(exp.column(led.group_column))
                 .having(exp.NEQ(this=sum_of(led.debit_column), expression=sum_of(led.credit_column))))
        out.append((Draft(f"ledger_unbalanced:{led.table}",
                   phrasing.ledger_balance(words, led.group_column, led.debit_column, led.credit_column),
                   exp.select(count_star()).from_(inner.subquery("unbalanced")), "integer", None,
                   "ledger_balance", ("balanced_ledger", led.table), (led.table,)), 0))
        diff = exp.Sub(this=sum_of(led.debit_column), expression=sum_of(led.credit_column))
        out.append((Draft(f"ledger_trial:{led.table}",
                   phrasing.trial_balance(words, led.debit_column, led.credit_column, led.decimals),
                   select_from(rounded(diff, led.decimals), led.table), "number", led.decimals, "trial_balance",
                   ("balanced_ledger", led.table), (led.table,)), money(0, led.decimals)))
    return out
