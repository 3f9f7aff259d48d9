"""The statements both backends share (`tasks.store.sql`), built in either placeholder style."""

from __future__ import annotations

import re

from gateway.tasks.store.sql import Statements, dollar, qmark


def test_each_shared_statement_numbers_its_parameters_in_order_so_both_styles_bind_alike() -> None:
    numbered, marked = vars(Statements(dollar)), vars(Statements(qmark))
    statements = {name: sql for name, sql in numbered.items() if isinstance(sql, str)}

    assert statements
    for name, sql in statements.items():
        numbers = [int(n) for n in re.findall(r"\$(\d+)", sql)]
        assert numbers == list(range(1, len(numbers) + 1)), name
        assert marked[name] == re.sub(r"\$\d+", "?", sql), name
