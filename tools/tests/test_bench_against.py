"""Tests of scripts/bench: --against's pairing of benches across the two trees, and its options (no cargo needed)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_against():
    spec = importlib.util.spec_from_file_location("against", ROOT / "scripts" / "bench.d" / "against.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bench_moved_to_another_crate_is_paired_by_its_name():
    against = load_against()
    before = {("loadtest", "submitter_quota"): "b-quota", ("consumer", "fold"): "b-cfold", ("pipeline", "fold"): "b-pfold"}
    after = {("local-stack", "submitter_quota"): "a-quota", ("consumer", "fold"): "a-cfold", ("pipeline", "fold"): "a-pfold"}
    against.pair_moved(before, after)
    assert before == {("local-stack", "submitter_quota"): "b-quota", ("consumer", "fold"): "b-cfold", ("pipeline", "fold"): "b-pfold"}


def test_a_name_unmatched_twice_on_a_side_is_not_guessed():
    against = load_against()
    before = {("a", "fold"): "b-a", ("b", "fold"): "b-b"}
    after = {("c", "fold"): "a-c"}
    against.pair_moved(before, after)
    assert before == {("a", "fold"): "b-a", ("b", "fold"): "b-b"}


def test_a_bench_on_one_side_only_stays_unpaired():
    against = load_against()
    before = {("producer", "producer"): "b"}
    after = {("producer", "producer"): "a", ("consumer", "new_bench"): "n"}
    against.pair_moved(before, after)
    assert before == {("producer", "producer"): "b"}


def test_only_picks_the_bench_ids_containing_one_of_its_strings():
    against = load_against()
    only = ["fold_3600_rows", "record/no_collapse_meter"]
    assert against.selected("fold_3600_rows/plain", only)
    assert against.selected("record/no_collapse_meter", only)
    assert not against.selected("record/no_collapse", only)
    assert not against.selected("handler_in_memory/1000", only)
    assert against.selected("handler_in_memory/1000", None)


def run_bench(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bench"), *args], capture_output=True, text=True, timeout=60)


def test_help_prints_the_usage_and_runs_nothing():
    out = run_bench("--help")
    assert out.returncode == 0, out.stderr
    assert "scripts/bench --against REV" in out.stdout
    assert "Compiling" not in out.stderr and "Running" not in out.stderr


def test_an_unknown_option_is_refused_before_anything_runs():
    out = run_bench("--quik")
    assert out.returncode == 2
    assert "unrecognized arguments: --quik" in out.stderr
