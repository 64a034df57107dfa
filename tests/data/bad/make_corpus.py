"""Regenerate the bad-input corpus in this folder: `python tests/data/bad/make_corpus.py`.

Each file holds valid records except for one planted defect; MANIFEST.json says where the
loader must report it (line or row, field, a fragment of the reason). The 50 MB line is not
here: tests/test_reliability_input.py generates it in a temporary folder.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def record(i: int, **override: Any) -> dict[str, Any]:
    """A valid benchmark record (the shape of prbench.testing.records.make_record, frozen here)."""
    topic = ["hiking", "baking", "chess"][i % 3]
    rec = {
        "id": f"ex-{i:03d}",
        "user_id": f"user-{i % 3}",
        "category": ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"][i % 3],
        "question": f"How should I plan my weekend around {topic}? (item {i})",
        "profile": [{"id": f"u{i % 3}-p{j}", "category": topic, "text": f"Post {j}: I love {topic}."}
                    for j in range(3)],
        "narrative": f"I care about {topic} and want it cheap.",
        "rubric_aspects": [{"aspect": f"Centres on {topic}", "reason": "They love it.", "evidence": f"I care about {topic}"},
                           {"aspect": "Low cost", "reason": "Budget matters.", "evidence": "cheap"}],
        "chosen": f"Spend Saturday on {topic} and keep it cheap.",
        "rejected": "Book a guided city tour and a fancy brunch.",
    }
    rec.update(override)
    return rec


def line(rec: Any) -> str:
    return json.dumps(rec, ensure_ascii=False) + "\n"


def with_defect(n: int, at: int, mutate) -> str:
    """n records as JSONL; record `at` (0-based) mutated in place by `mutate(rec)`."""
    out = []
    for i in range(n):
        rec = record(i)
        if i == at:
            mutate(rec)
        out.append(line(rec))
    return "".join(out)


def _pop(key: str):
    return lambda r: r.pop(key)


def _set(key: str, value: Any):
    return lambda r: r.__setitem__(key, value)


# name -> (content, expected {line, field, reason fragment})
TEXT_FILES: dict[str, tuple[str, dict[str, Any]]] = {
    "truncated_json.jsonl": (line(record(0)) + line(record(1))[:70] + "\n" + line(record(2)),
                             {"line": 2, "field": None, "reason": "invalid JSON"}),
    "truncated_last_line.jsonl": (line(record(0)) + line(record(1))[:-30],
                                  {"line": 2, "field": None, "reason": "invalid JSON"}),
    "not_an_object.jsonl": (line(record(0)) + "[1, 2, 3]\n", {"line": 2, "field": None, "reason": "must be a JSON object"}),
    "wrong_type_question.jsonl": (with_defect(3, 2, _set("question", 5)),
                                  {"line": 3, "field": "question", "reason": "valid string (got int)"}),
    "wrong_type_profile.jsonl": (with_defect(3, 1, _set("profile", "I love hiking")),
                                 {"line": 2, "field": "profile", "reason": "valid list (got str)"}),
    "wrong_type_id.jsonl": (with_defect(2, 0, _set("id", 1.5)), {"line": 1, "field": "id", "reason": "got float"}),
    "wrong_type_post_text.jsonl": (with_defect(2, 1, lambda r: r["profile"][1].__setitem__("text", ["a", "b"])),
                                   {"line": 2, "field": "profile[1].text", "reason": "got list"}),
    "nan_response.jsonl": (line(record(0)) + line(record(1)).replace('"chosen": "Spend Saturday on baking and keep it cheap."',
                                                                     '"chosen": NaN'),
                           {"line": 2, "field": "chosen", "reason": "got float"}),
    "missing_question.jsonl": (with_defect(3, 1, _pop("question")),
                               {"line": 2, "field": "question", "reason": "missing required field"}),
    "missing_chosen.jsonl": (with_defect(3, 2, _pop("chosen")),
                             {"line": 3, "field": "chosen", "reason": "missing required field"}),
    "missing_id.jsonl": (with_defect(2, 0, _pop("id")), {"line": 1, "field": "id", "reason": "missing required field"}),
    "null_question.jsonl": (with_defect(2, 1, _set("question", None)),
                            {"line": 2, "field": "question", "reason": "(got null)"}),
    "null_profile.jsonl": (with_defect(2, 0, _set("profile", None)), {"line": 1, "field": "profile", "reason": "got null"}),
    "null_rejected.jsonl": (with_defect(2, 1, _set("rejected", None)),
                            {"line": 2, "field": "rejected", "reason": "got null"}),
    "empty.jsonl": ("", {"line": None, "field": None, "reason": "no records"}),
    "blank_lines.jsonl": ("\n   \n\t\n", {"line": None, "field": None, "reason": "no records"}),
    "empty_array.json": ("[]", {"line": None, "field": None, "reason": "no records"}),
    "duplicate_ids.jsonl": (line(record(0)) + line(record(1)) + line(record(2, id="ex-000")),
                            {"line": 3, "field": "id", "reason": "duplicate id 'ex-000'"}),
    "duplicate_int_and_str_ids.jsonl": (line(record(0, id=7)) + line(record(1, id="7")),
                                        {"line": 2, "field": "id", "reason": "duplicate id '7'"}),
    "empty_chosen.jsonl": (with_defect(2, 1, _set("chosen", "")), {"line": 2, "field": "chosen", "reason": "must not be empty"}),
    "blank_rejected.jsonl": (with_defect(2, 1, _set("rejected", "  \n ")),
                             {"line": 2, "field": "rejected", "reason": "must not be empty"}),
    "post_without_text.jsonl": (with_defect(2, 1, lambda r: r["profile"][2].pop("text")),
                                {"line": 2, "field": "profile[2].text", "reason": "missing required field"}),
    "post_blank_text.jsonl": (with_defect(2, 0, lambda r: r["profile"][0].__setitem__("text", " ")),
                              {"line": 1, "field": "profile[0].text", "reason": "must not be empty"}),
    "aspect_without_title.jsonl": (with_defect(2, 1, lambda r: r["rubric_aspects"][1].pop("aspect")),
                                   {"line": 2, "field": "rubric_aspects[1].aspect", "reason": "missing required field"}),
    "aspect_empty_title.jsonl": (with_defect(2, 1, lambda r: r["rubric_aspects"][0].__setitem__("aspect", "")),
                                 {"line": 2, "field": "rubric_aspects[0].aspect", "reason": "must not be empty"}),
    # any category is a category now (#37); a misspelt stance would read as "no verdict": refused
    "unknown_stance.jsonl": (with_defect(3, 1, lambda r: r["profile"][0].__setitem__("stance", "disagre")),
                             {"line": 2, "field": "profile[0].stance", "reason": "unknown stance 'disagre'"}),
    "huge_integer.jsonl": (line(record(0)) + '{"id": ' + "9" * 5000 + "}\n",
                           {"line": 2, "field": None, "reason": "invalid JSON"}),
    "deep_nesting.jsonl": ("[" * 20000 + "]" * 20000 + "\n", {"line": 1, "field": None, "reason": "nested too deeply"}),
    "json_not_array.json": (json.dumps({"records": [record(0)]}),
                            {"line": None, "field": None, "reason": "must hold an array of records"}),
    "bad_record_in_array.json": (json.dumps([record(0), {k: v for k, v in record(1).items() if k != "question"}]),
                                 {"line": 2, "field": "question", "reason": "missing required field"}),
    "truncated_array.json": (json.dumps([record(0), record(1)])[:-40],
                             {"line": None, "field": None, "reason": "invalid JSON"}),
}


def binary_files() -> dict[str, tuple[bytes, dict[str, Any]]]:
    good = line(record(0)).encode()
    bad_utf8 = line(record(1)).encode().replace(b"baking", b"bak\xe9ing")  # Latin-1 e-acute
    full_gz = gzip.compress((line(record(0)) * 1 + "".join(line(record(i)) for i in range(1, 40))).encode(), mtime=0)
    return {
        "not_utf8.jsonl": (good + bad_utf8, {"line": 2, "field": None, "reason": "not UTF-8"}),
        "utf16.jsonl": (line(record(0)).encode("utf-16"), {"line": 1, "field": None, "reason": "not UTF-8"}),
        "truncated.jsonl.gz": (full_gz[: len(full_gz) // 2], {"line": "any", "field": None, "reason": "truncated gzip"}),
        "not_gzip.jsonl.gz": (good, {"line": None, "field": None, "reason": "cannot read"}),
        "corrupt.parquet": (b"PAR1" + b"\x00garbage" * 50, {"line": None, "field": None,
                                                          "reason": "not a readable parquet file"}),
    }


def parquet_files() -> dict[str, tuple[Any, dict[str, Any]]]:
    import pyarrow as pa

    recs = [record(i) for i in range(3)]
    profile_as_string = pa.Table.from_pylist([{**r, "profile": json.dumps(r["profile"])} for r in recs])
    no_question = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "question"} for r in recs])
    int_question = pa.Table.from_pylist([{**r, "question": i} for i, r in enumerate(recs)])
    empty = pa.Table.from_pylist(recs).slice(0, 0)
    return {
        "profile_as_string.parquet": (profile_as_string, {"line": 1, "field": "profile", "reason": "valid list (got str)"}),
        "missing_question_column.parquet": (no_question, {"line": 1, "field": "question",
                                                          "reason": "missing required field"}),
        "question_as_int.parquet": (int_question, {"line": 1, "field": "question", "reason": "got int"}),
        "zero_rows.parquet": (empty, {"line": None, "field": None, "reason": "no records"}),
    }


def main() -> None:
    import pyarrow.parquet as pq

    manifest: dict[str, dict[str, Any]] = {}
    for name, (text, expect) in TEXT_FILES.items():
        (HERE / name).write_text(text, encoding="utf-8")
        manifest[name] = expect
    for name, (data, expect) in binary_files().items():
        (HERE / name).write_bytes(data)
        manifest[name] = expect
    for name, (table, expect) in parquet_files().items():
        pq.write_table(table, HERE / name)
        manifest[name] = expect
    (HERE / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
