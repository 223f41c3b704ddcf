"""The README's tables that come from a measured run are that run's, as its
generator renders them (the tables generated from the source's own tables,
in docs/configuration.md and docs/report.md, are tests/unit/
test_documentation.cc's)."""
import os
import subprocess
import sys

from harness import SOURCE_DIR

README = os.path.join(SOURCE_DIR, "README.md")
FRAMEWORKS = os.path.join(SOURCE_DIR, "tools", "frameworks", "run")


def table_after(heading):
    """The first Markdown table after `heading` in the README."""
    with open(README) as f:
        lines = f.read().split("\n")
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return "\n".join(rows) + "\n"


def test_does_it_help_you_is_the_framework_suites_last_results():
    rendered = subprocess.run([sys.executable, FRAMEWORKS, "--table"], capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr
    assert table_after("## Does it help you?") == rendered.stdout
