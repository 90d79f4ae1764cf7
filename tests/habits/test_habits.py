"""The habits that keep the code easy to change, as checks `make test` runs: formatted by ruff format, clean under
ruff check (no function over complexity 12) and mypy (strict where pyproject.toml says), modules within 500 lines,
commit subjects of 72 characters at most, and a pre-commit configuration that runs the same tools before each
commit."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROJECT
from tools import commit_subject, module_size

pytestmark = pytest.mark.habits  # runs tools: `make lint`

PY = sys.executable
TYPED = ["shared", "functions", "local_host", "worker", "queue_admin", "tools", "function_app.py"]
# Subjects were paragraphs before this commit (issue #63); every commit after it keeps to the limit.
SUBJECTS_KEPT_SINCE = "44d000b6"
MODULE_PATH = re.compile(r"\b(?:shared|local_host|functions|worker|queue_admin|tools|bench)/[\w/]+\.(?:py|js)\b")


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=300)


def test_the_tree_is_formatted_and_lint_clean():
    formatted = run(PY, "-m", "ruff", "format", "--check", ".")
    assert formatted.returncode == 0, formatted.stdout[-2000:]
    linted = run(PY, "-m", "ruff", "check", ".")
    assert linted.returncode == 0, linted.stdout[-3000:]


def test_modules_stay_within_their_size():
    assert module_size.oversized() == [], "split these modules by role"


def test_module_size_counts_logic_and_asks_for_a_split_by_role(tmp_path):
    (tmp_path / "shared").mkdir()
    logic = "".join(f"def f{i}():\n    return {i}\n" for i in range(module_size.LIMIT // 2))
    (tmp_path / "shared" / "big.py").write_text(logic + "def last():\n    return 0\n")
    (tmp_path / "shared" / "small.py").write_text("x = 1\n" * module_size.LIMIT)
    # A table and a class of fields are declarations: 600 lines of them beside a little logic pass.
    table = "TABLE = {\n" + "".join(f"    'k{i}': {i},\n" for i in range(400)) + "}\n"
    fields = "class Settings:\n" + "".join(f"    s{i}: int = {i}\n" for i in range(200)) + "\n"
    (tmp_path / "shared" / "tables.py").write_text(table + fields + "def use():\n    return TABLE\n")
    found = module_size.oversized(tmp_path)
    assert len(found) == 1 and found[0].startswith("shared/big.py: 502 lines of logic (at most 500; split it by role")
    assert "its parts are f0, f1, f2" in found[0]


def test_the_code_type_checks(tmp_path):
    checked = run(PY, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy"), *TYPED)
    assert checked.returncode == 0, checked.stdout[-3000:]


def test_commit_subjects_keep_to_72_characters():
    if run("git", "cat-file", "-e", f"{SUBJECTS_KEPT_SINCE}^{{commit}}").returncode != 0:
        pytest.skip(f"this clone's history does not reach {SUBJECTS_KEPT_SINCE}")
    refused = run(PY, "tools/commit_subject.py", "--range", f"{SUBJECTS_KEPT_SINCE}..HEAD")
    assert refused.returncode == 0, refused.stderr


def test_the_commit_msg_hook_refuses_a_long_subject(tmp_path: Path):
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("# a comment git strips\nqueue: a subject that says what changed\n\nwhy, at length " * 3)
    assert commit_subject.main([str(message)]) == 0
    message.write_text("queue: " + "a subject that goes on " * 4 + "\n\nbody\n")
    assert commit_subject.main([str(message)]) == 1
    assert commit_subject.too_long("x" * 72) is None
    assert "73 characters" in (commit_subject.too_long("x" * 73) or "")


def test_the_pre_commit_hooks_are_the_checks_above():
    valid = run(PY, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    config = (PROJECT / ".pre-commit-config.yaml").read_text()
    for entry in (
        "ruff format",
        "ruff check",
        "mypy",
        "lint-imports",
        "shared/api/inspector",
        "tools/commit_subject.py",
        "tools/module_size.py",
    ):
        assert entry in config
    assert "commit-msg" in config


def test_browser_tests_answer_dialogs_through_one_helper():
    """A dialog no handler saw left a test polling a list until its timeout, which named neither the dialog nor the
    click (stop 91's CI). answer_dialog waits for the dialog the click opens, through Playwright, and says so."""
    helper = PROJECT / "tests" / "acceptance" / "browsing.py"
    handlers = [
        f"{path.relative_to(PROJECT)}:{number}"
        for path in (PROJECT / "tests").rglob("*.py")
        if path not in (helper, Path(__file__))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if '"dialog"' in line and ("page.once(" in line or "page.on(" in line)
    ]
    assert handlers == [], "answer dialogs with tests.acceptance.browsing.answer_dialog"


def test_unit_tests_are_named_after_the_module_they_test():
    """A unit file is named after the module it tests (tests/unit/test_<stem>.py, issue #88); one that tests
    several names them in its docstring, as paths."""
    code = subprocess.run(
        ["git", "ls-files", *TYPED, "worker"], cwd=PROJECT, capture_output=True, text=True, check=True
    ).stdout.split()
    stems = {Path(f).stem for f in code if f.endswith((".py", ".js"))}
    stems |= {Path(f).parent.name for f in code if f.endswith("__init__.py")}
    files = sorted((PROJECT / "tests" / "unit").glob("test_*.py"))
    named = [f for f in files if f.stem.removeprefix("test_") in stems]
    unnamed = [f.name for f in files if f not in named and not MODULE_PATH.search(f.read_text().split('"""')[1])]
    assert unnamed == [], "name these after the module they test, or name their modules in their docstring"
    assert len(named) >= 0.9 * len(files), f"{len(named)} of {len(files)} unit files named after a module"


def test_no_test_module_imports_another():
    """What tests share lives in a helpers module (tests/unit/helpers.py, tests/acceptance/helpers.py, or beside
    conftest: tests/services.py, tests/answers.py): a test module that imports another runs that module's setup
    (its `pytestmark`, its import-time probes) where it was not meant to, and ties two files that a reader takes
    for independent (issue #88)."""
    found = [
        f"{path.relative_to(PROJECT)}:{node.lineno} {node.module}"
        for path in sorted((PROJECT / "tests").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module
        and node.module.startswith("tests.")
        and node.module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert found == [], "move what they share to the tier's helpers module"


# Functions a test defines and awaits at once, whose statements are the test's own (`(await go())`).
TEST_WRAPPERS = {"go", "scenario"}


def _test_statements(node: ast.AST) -> Iterator[ast.AST]:
    """What a test's body runs itself: its statements and those of its wrappers, not the fakes it defines."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and child.name not in TEST_WRAPPERS:
            continue
        if isinstance(child, ast.Lambda | ast.ClassDef):
            continue
        yield child
        yield from _test_statements(child)


def _waits(node: ast.AST) -> bool:
    """A sleep of more than no time."""
    if not isinstance(node, ast.Call) or ast.unparse(node.func) not in ("asyncio.sleep", "time.sleep"):
        return False
    return not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0)


def test_no_unit_test_waits_on_the_wall_clock():
    """A unit test waits for other tasks with tests.turns.others_run or an event, and lets time pass on a clock of
    its own: the service's (tests.clock), or the event loop's fake one (`@pytest.mark.looptime`), where a sleep takes
    no real time. A sleep in a test's own statements otherwise makes what it asserts depend on the machine's speed
    (issue #88). A fake's own latency (a sleep in a function the test defines) stays."""
    found = []
    for path in sorted((PROJECT / "tests" / "unit").glob("test_*.py")):
        for test in ast.parse(path.read_text()).body:
            if not isinstance(test, ast.FunctionDef | ast.AsyncFunctionDef) or not test.name.startswith("test_"):
                continue
            if any("looptime" in ast.unparse(d) for d in test.decorator_list):
                continue
            found += [
                f"{path.name}:{call.lineno} {ast.unparse(call)}" for call in _test_statements(test) if _waits(call)
            ]
    assert found == [], "wait with others_run, an event or a test clock"


def test_no_async_test_starts_an_event_loop_of_its_own():
    """Under pytest-asyncio's auto mode an `async def` test runs in the test's loop; an `asyncio.run` inside one
    would fail, and in a sync test that only wraps async code it hides the loop from fixtures (issue #88)."""
    found = [
        f"{path.relative_to(PROJECT)}:{node.lineno}"
        for path in sorted((PROJECT / "tests").rglob("test_*.py"))
        for test in ast.parse(path.read_text()).body
        if isinstance(test, ast.AsyncFunctionDef)
        for node in ast.walk(test)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "asyncio.run"
    ]
    assert found == []
