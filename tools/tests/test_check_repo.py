"""Tests of scripts/check-repo on small temporary trees (no cargo needed: --no-machete)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-repo"


def run(root: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "--no-machete", *flags],
        capture_output=True,
        text=True,
    )


def write(root: Path, path: str, text: str) -> None:
    p = root / path
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write(tmp_path, "docs/guarantees.md", "# Guarantees\n\n## Billing time\n\nSee [the index](README.md).\n")
    write(tmp_path, "docs/README.md", "# Docs\n")
    write(tmp_path, "crate/Cargo.toml", "[package]\nname = \"c\"\n")
    write(tmp_path, "crate/tests/fixtures/batch.json", "{}\n")
    write(
        tmp_path,
        "crate/src/lib.rs",
        "//! Exactly once (docs/guarantees.md, \"Billing time\"); fixture tests/fixtures/batch.json.\n"
        "//! Public: <https://docs.aws.amazon.com/marketplace/latest/userguide/metering-service-quotas.html>.\n"
        "//! State lives in .awsmp-local/env and .awsmp-local/catalog.json at run time.\n"
        "pub fn f() {}\n",
    )
    write(tmp_path, "crate/README.md", "Design: [architecture](../docs/guarantees.md#billing-time).\n")
    return tmp_path


def test_good_citations_pass(tree: Path):
    out = run(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == ""


def test_missing_relative_path_fails_with_its_line(tree: Path):
    write(tree, "crate/src/time.rs", "use x;\n/// Rules in docs/time-rules.md.\nfn g() {}\n")
    out = run(tree)
    assert out.returncode == 1
    assert "crate/src/time.rs:2: cites docs/time-rules.md, which is not in the repository" in out.stdout


def test_broken_markdown_link_fails(tree: Path):
    write(tree, "crate/README.md", "Design: [gone](../docs/nowhere.md).\n")
    out = run(tree)
    assert out.returncode == 1
    assert "crate/README.md:1: link to ../docs/nowhere.md" in out.stdout


@pytest.mark.parametrize(
    "comment",
    [
        "// as SPEC §7 says",
        "// see BUILD-NOTES.md",
        "// reference/system-design.md, Aggregator",
        "// the house STYLE.md",
        "// /work/shared/notes",
        "// metering-facts.md",
    ],
)
def test_documents_outside_the_repository_fail(tree: Path, comment: str):
    write(tree, "crate/src/bad.rs", f"fn h() {{}}\n{comment}\n")
    out = run(tree)
    assert out.returncode == 1
    assert out.stdout.startswith("crate/src/bad.rs:2: cites "), out.stdout


def test_size_limit_counts_lines_before_the_test_module(tree: Path):
    body = "fn a() {}\n" * 600
    tests = "#[cfg(test)]\nmod tests {\n" + "    fn t() {}\n" * 100 + "}\n"
    write(tree, "crate/src/ok.rs", body + tests)
    assert run(tree).returncode == 0
    write(tree, "crate/src/big.rs", body + "fn b() {}\n")
    out = run(tree)
    assert out.returncode == 1
    assert "crate/src/big.rs:1: 601 non-test lines (limit 600)" in out.stdout
    write(tree, "crate/tests/long.rs", body * 2)
    assert "crate/tests/long.rs" not in run(tree).stdout
    assert run(tree, "--no-size").returncode == 0


def test_machete_output_is_parsed_into_findings(tree: Path):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("check_repo", str(SCRIPT))
    spec = importlib.util.spec_from_loader("check_repo", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    write(tree, "crate/Cargo.toml", "[package]\nname = \"c\"\n\n[dependencies]\nserde.workspace = true\nhex = \"0.4\"\n")
    output = (
        "cargo-machete found the following unused dependencies in this directory:\n"
        "c -- ./crate/Cargo.toml:\n\thex\n\n"
        "If you believe cargo-machete has detected an unused dependency incorrectly,\n"
    )
    assert module.parse_machete(tree, output) == [
        "crate/Cargo.toml:6: unused dependency hex (cargo machete)"
    ]


def test_cited_sections_must_be_headings(tree: Path):
    write(tree, "docs/guarantees.md", "# Guarantees\n\n## Billing time\n\n```\n# not a heading\n```\n")
    write(tree, "crate/src/verify.rs", '//! Authority (docs/guarantees.md,\n//! "Billing time").\nfn v() {}\n')
    assert run(tree).returncode == 0, run(tree).stdout
    write(tree, "crate/src/verify.rs", '//! See docs/guarantees.md, "Billing time", "Dedup window".\nfn v() {}\n')
    write(tree, "docs/README.md", 'See [guarantees](guarantees.md), "not a heading".\n')
    out = run(tree)
    assert out.returncode == 1
    assert 'crate/src/verify.rs:1: cites section "Dedup window" of docs/guarantees.md' in out.stdout
    assert 'docs/README.md:1: cites section "not a heading" of guarantees.md' in out.stdout
    assert "Billing time" not in out.stdout


def test_path_attributes_fail_and_the_module_tree_passes(tree: Path):
    write(tree, "crate/src/fold.rs", "mod key;\n#[cfg(test)]\nmod tests;\n")
    write(tree, "crate/src/fold/key.rs", "pub fn k() {}\n")
    write(tree, "crate/src/fold/tests.rs", "// a `#[path]` named in a comment is prose\n#[test]\nfn t() {}\n")
    assert run(tree).returncode == 0, run(tree).stdout
    write(tree, "crate/src/fold.rs", 'mod key;\n#[cfg(test)]\n#[path = "fold_tests.rs"]\nmod tests;\n')
    write(tree, "crate/src/wire.rs", '#[cfg_attr(feature = "x", path = "wire_x.rs")]\nmod x;\n')
    out = run(tree)
    assert out.returncode == 1
    assert "crate/src/fold.rs:3: #[path] attribute" in out.stdout
    assert "crate/src/wire.rs:1: #[path] attribute" in out.stdout
    assert "fold/tests.rs" not in out.stdout


def test_test_modules_in_their_own_directory_are_test_code(tree: Path):
    body = "fn a() {}\n" * 601
    write(tree, "crate/src/fold/tests.rs", body)
    write(tree, "crate/src/producer/plain_tests.rs", body)
    assert run(tree).returncode == 0, run(tree).stdout
    write(tree, "crate/src/fold/key.rs", body)
    assert "crate/src/fold/key.rs:1: 601 non-test lines" in run(tree).stdout


def test_docs_name_code_that_exists(tree: Path):
    write(
        tree,
        "crate/src/cleanup.rs",
        "pub struct CleanupMessage {\n    pub folded: Option<u64>,\n}\n"
        "impl CleanupMessage {\n    pub fn folded_batches() {}\n}\n"
        "pub enum RawStatus {\n    Aggregated,\n}\npub fn finalize_folded() {}\n",
    )
    write(
        tree,
        "docs/README.md",
        "12. Cleanup (`CleanupMessage::folded_batches`, `crate/src/cleanup.rs`) calls `finalize_folded()`,\n"
        "stamps `RawStatus::Aggregated`, reads `CleanupMessage::folded`; `tokio::spawn` is not ours;\n"
        "it writes `report.json` and lives in `crate/`.\n",
    )
    out = run(tree)
    assert out.returncode == 0, out.stdout
    write(
        tree,
        "docs/README.md",
        "12. Cleanup (`CleanupMessage::batches`, `crate/src/cleaner.rs`) calls `finalize_row()`\n"
        "and `RawStatus::Stamped`; see `cleaner.rs`.\n",
    )
    out = run(tree)
    assert out.returncode == 1
    assert "docs/README.md:1: names `CleanupMessage::batches`, but `CleanupMessage`'s crate defines no `batches`" in out.stdout
    assert "docs/README.md:1: names `crate/src/cleaner.rs`, which is not in the repository" in out.stdout
    assert "docs/README.md:1: names `finalize_row()`, which no Rust source defines" in out.stdout
    assert "docs/README.md:2: names `RawStatus::Stamped`" in out.stdout
    assert "docs/README.md:2: names `cleaner.rs`, and no file of that name is in the repository" in out.stdout
