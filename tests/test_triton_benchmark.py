"""benchmarks/triton_vs_serve.py end to end on the CPU (tiny config, a few requests): both servers return every
token, the ratio is reported, and the Triton load / unload cycles show the free-slot gauge at the slot count
after each load, gone after each unload, and one Python-backend stub per load with none left. The H200 figures
come from the same script (benchmarks/device_triton.sh)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import triton_vs_serve  # noqa: E402
from trtllm_replayssm.serve.triton_env import TritonUnavailable, find_server  # noqa: E402


def test_cpu_run_writes_the_table(tmp_path):
    pytest.importorskip("fastapi")
    try:
        find_server()
    except TritonUnavailable as e:
        pytest.skip(str(e))
    rc = triton_vs_serve.main([str(tmp_path), "--device", "cpu", "--config", "tiny", "--requests", "3",
                               "--prompt-len", "4", "--output-len", "5", "--rounds", "1", "--clients", "2",
                               "--cycles", "2"])
    res = json.loads((tmp_path / "triton_vs_serve.json").read_text())
    assert rc == 0, res
    for server in ("triton", "serve"):
        assert res[server]["requests_ok"] == 3 and res[server]["tokens_per_s"] > 0, res[server]
    assert res["serve"]["route"].startswith("serve: HTTP")
    assert res["ratio"] == pytest.approx(res["triton"]["tokens_per_s"] / res["serve"]["tokens_per_s"])
    assert [c["cycle"] for c in res["cycles"]] == [1, 2]
    for c in res["cycles"]:
        assert c["free_slots_after_load"] == c["free_slots_after_run"] == 3 and c["free_slots_after_unload"] is None
        assert c["stubs_loaded"] == 1 and c["stubs_after_unload"] == 0
    assert res["leak"].startswith("no leak")
    table = (tmp_path / "triton_vs_serve.md").read_text()
    assert "| triton | triton: HTTP generate_stream" in table and "Triton / serve:" in table


def test_refuses_a_bad_count(capsys):
    with pytest.raises(SystemExit) as e:
        triton_vs_serve.main(["/tmp/unused", "--device", "cpu", "--requests", "0"])
    assert e.value.code == 2 and "--requests must be >= 1, got 0" in capsys.readouterr().err
