"""benchmarks/serve_decode.py's code path on the CPU (--smoke): it runs, compares both modes at every batch and
reports the state budget's fit. The H200 figures come from the same script without --smoke."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import serve_decode  # noqa: E402


def test_smoke_run_writes_the_tables(tmp_path):
    out = tmp_path / "t.md"
    assert serve_decode.main(["--smoke", "--tmp", str(tmp_path / "cfg"), "--out", str(out)]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| tiny |")]
    assert len(rows) == 3  # batches 1 and 2, then the budget row
    for row in rows[:2]:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert float(cells[2]) > 0 and float(cells[3]) > 0 and cells[6].endswith("x")
    fit = [c.strip() for c in rows[2].split("|")[1:-1]]
    conv, replay = (int(v) for v in fit[1].split(" / ")), (int(v) for v in fit[2].split(" / "))
    assert all(c > 0 for c in conv) and all(r > 0 for r in replay)
