#!/usr/bin/env python3
"""Run docs/tutorial.md as a newcomer would, and fail if any step does not do what it says.

    python3 scripts/check_tutorial.py [--keep] [--tutorial docs/tutorial.md] [--every-block]
    python3 scripts/check_tutorial.py --tutorial docs/from-celery.md --every-block

The tutorial marks each of its steps with an HTML comment just before a fenced block (the
comments do not show in the rendered page):

    <!-- tutorial: run -->                 run the bash block below, in the reader's shell
    <!-- tutorial: skip: WHY -->           a command a person runs that this script cannot
                                           (a browser, a path only the reader knows)
    <!-- tutorial: create -->              write the block below to the file named by its
    <!-- tutorial: append -->              title="..." (append: add it at the end)
    <!-- tutorial: background NAME -->     start the block in the background ("a second
                                           terminal"), its output going to NAME's log
    <!-- tutorial: output [NAME] [SECS] -->  the text block below must appear, line by line
                                           and in order, in NAME's log (waiting up to SECS
                                           seconds, default 20) or, without NAME, in the
                                           output of the last run block; "..." matches
                                           anything
    <!-- tutorial: interrupt NAME -->      press Ctrl+C in NAME's terminal (SIGINT); it must
                                           exit with status 0 and print the block below
    <!-- tutorial: verify: WHY             commands of the script's own, run like a run
    ...commands...                         block and invisible to the reader (for checks a
    -->                                    person makes with their eyes)

Every bash block of the tutorial must carry a marker, so a command cannot be added to the
page without being run here; with --every-block, so must every block of code in any language
but plain text (a block shown only for comparison, such as another library's code, is marked
skip with the reason), so that no code is added to the page without being run either.
The steps run in a new temporary directory, in order, each in
bash with `set -euo pipefail`; the working directory and the exported variables (the
activated virtualenv) carry over from step to step, as in one terminal. CRONQUEUE_SRC, which
the tutorial asks the reader to set, points at a clean copy of this checkout (the files git
tracks or does not ignore), so the reader's `pip install "$CRONQUEUE_SRC"` installs the
package as it is now, without a build/ folder or anything else left in the work tree.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!--\s*tutorial:\s*(?P<body>.*?)\s*-->", re.S)
FENCE = re.compile(
    r"^(?P<fence>```+)(?P<info>[^\n]*)\n(?P<code>.*?)^(?P=fence)[ \t]*$", re.S | re.M
)
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", "zsh"}
DEFAULT_WAIT = 20.0


@dataclass
class Step:
    kind: str  # run, skip, create, append, background, output, interrupt
    line: int
    code: str = ""
    name: str | None = None  # a background process, or a file path
    timeout: float = DEFAULT_WAIT
    note: str = ""


@dataclass
class Background:
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Runner:
    workdir: Path
    env_file: Path
    first_env_file: Path
    cwd_file: Path
    logs: Path
    backgrounds: dict[str, Background] = field(default_factory=dict)
    last_output: str = ""

    def shell(self, code: str) -> str:
        """A bash script that restores the state, runs ``code`` and saves the state."""
        return "\n".join(
            [
                "set -euo pipefail",
                f"source {shlex.quote(str(self.env_file))}",
                f'cd "$(cat {shlex.quote(str(self.cwd_file))})"',
                code,
                f"pwd > {shlex.quote(str(self.cwd_file))}",
                f"export -p > {shlex.quote(str(self.env_file))}",
            ]
        )

    def new_terminal(self, code: str) -> str:
        """A bash script for a new terminal: the first environment, in the home folder."""
        return "\n".join(
            [
                "set -euo pipefail",
                f"source {shlex.quote(str(self.first_env_file))}",
                f"cd {shlex.quote(str(self.workdir))}",
                code,
            ]
        )


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


UNCHECKED_LANGUAGES = {"", "text", "txt", "console-output"}


def parse(text: str, *, every_block: bool = False) -> list[Step]:
    """The steps, in order; raises SystemExit on an unmarked bash block (with
    ``every_block``, an unmarked block of any code) or a bad marker."""
    steps: list[Step] = []
    problems: list[str] = []
    fences = list(FENCE.finditer(text))
    marked: set[int] = set()
    for marker in MARKER.finditer(text):
        body = marker.group("body")
        line = line_of(text, marker.start())
        head, _, rest = body.partition("\n")
        words = head.split()
        kind = words[0].rstrip(":") if words else ""
        if kind == "verify":
            steps.append(Step("run", line, code=rest, note=head.partition(":")[2].strip()))
            continue
        # the fenced block that follows the marker (only blank lines between them)
        block = next((f for f in fences if f.start() > marker.end()), None)
        if block is None or text[marker.end() : block.start()].strip():
            problems.append(f"line {line}: marker '{head}' is not followed by a fenced block")
            continue
        marked.add(block.start())
        info = block.group("info")
        code = block.group("code")
        title = re.search(r'title="([^"]+)"', info)
        if kind in ("run", "skip"):
            steps.append(Step(kind, line, code=code, note=head.partition(":")[2].strip()))
        elif kind in ("create", "append"):
            if title is None:
                problems.append(f'line {line}: a {kind} block needs title="path"')
                continue
            steps.append(Step(kind, line, code=code, name=title.group(1)))
        elif kind == "background" and len(words) == 2:
            steps.append(Step(kind, line, code=code, name=words[1]))
        elif kind == "output" and len(words) <= 3:
            step = Step(kind, line, code=code)
            for word in words[1:]:
                if re.fullmatch(r"\d+(\.\d+)?", word):
                    step.timeout = float(word)
                else:
                    step.name = word
            steps.append(step)
        elif kind == "interrupt" and len(words) == 2:
            steps.append(Step(kind, line, code=code, name=words[1]))
        else:
            problems.append(f"line {line}: unknown marker '{head}'")
    for block in fences:
        language = block.group("info").split()[0] if block.group("info").split() else ""
        needs_marker = language in SHELL_LANGUAGES or (
            every_block and language not in UNCHECKED_LANGUAGES
        )
        if needs_marker and block.start() not in marked:
            problems.append(
                f"line {line_of(text, block.start())}: a {language} block without a "
                "'<!-- tutorial: run -->' (or skip/create/append/background) marker"
            )
    if problems:
        raise SystemExit("tutorial markers:\n  " + "\n  ".join(problems))
    steps.sort(key=lambda step: step.line)
    return steps


def patterns(expected: str) -> list[re.Pattern[str]]:
    """One regex per non-empty line; "..." matches anything."""
    return [
        re.compile(".*?".join(re.escape(part) for part in line.strip().split("...")))
        for line in expected.splitlines()
        if line.strip()
    ]


def missing(expected: str, output: str) -> list[str]:
    """The expected lines not found in ``output`` (each after the previous one)."""
    lines = output.splitlines()
    position = 0
    for pattern in patterns(expected):
        for index in range(position, len(lines)):
            if pattern.search(lines[index]):
                position = index + 1
                break
        else:
            return [pattern.pattern]
    return []


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run_step(runner: Runner, step: Step) -> None:
    banner(f"line {step.line}: {step.kind} {step.name or ''} {step.note}".rstrip())
    if step.kind == "skip":
        print(f"skipped ({step.note}):\n{step.code}", end="")
        return
    if step.kind in ("create", "append"):
        cwd = Path(runner.cwd_file.read_text().strip())
        target = cwd / str(step.name)
        if step.kind == "create" and target.exists():
            raise AssertionError(f"{step.name} already exists, but the tutorial creates it")
        if step.kind == "append" and not target.exists():
            raise AssertionError(f"{step.name} does not exist, but the tutorial appends to it")
        with target.open("a" if step.kind == "append" else "w") as out:
            out.write(step.code)
        print(f"{step.kind} {target} ({len(step.code.splitlines())} lines)")
        return
    if step.kind == "run":
        for command in step.code.strip().splitlines():
            print(f"$ {command}")
        started = time.monotonic()
        result = subprocess.run(
            ["bash", "-c", runner.shell(step.code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        runner.last_output = result.stdout
        print(result.stdout, end="")
        print(f"({time.monotonic() - started:.1f}s)")
        if result.returncode:
            raise AssertionError(f"the commands at line {step.line} exited {result.returncode}")
        return
    if step.kind == "background":
        assert step.name is not None
        log = runner.logs / f"{step.name}.log"
        out = log.open("wb")
        for command in step.code.strip().splitlines():
            print(f"[{step.name}] $ {command}")
        # A second terminal: it starts in the home folder, without the virtualenv.
        process = subprocess.Popen(
            ["bash", "-c", runner.new_terminal(step.code)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        runner.backgrounds[step.name] = Background(process, log)
        print(f"started in the background (pid {process.pid}), output in {log}")
        return
    if step.kind == "output":
        if step.name is None:
            gone = missing(step.code, runner.last_output)
            if gone:
                raise AssertionError(f"the output lacks a line matching {gone[0]!r}")
            print("output as shown")
            return
        background = runner.backgrounds[step.name]
        deadline = time.monotonic() + step.timeout
        while True:
            gone = missing(step.code, background.log.read_text(errors="replace"))
            if not gone:
                print(f"{step.name} printed, as shown:\n{step.code}", end="")
                return
            if background.process.poll() is not None or time.monotonic() > deadline:
                print(background.log.read_text(errors="replace"))
                state = (
                    f"exited {background.process.returncode}"
                    if background.process.poll() is not None
                    else f"after {step.timeout:g}s"
                )
                raise AssertionError(f"{step.name} ({state}) printed no line matching {gone[0]!r}")
            time.sleep(0.5)
    if step.kind == "interrupt":
        assert step.name is not None
        background = runner.backgrounds.pop(step.name)
        os.killpg(background.process.pid, signal.SIGINT)
        try:
            code = background.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(background.process.pid, signal.SIGKILL)
            raise AssertionError(f"{step.name} did not stop within 60s of Ctrl+C") from None
        output = background.log.read_text(errors="replace")
        gone = missing(step.code, output)
        if code != 0 or gone:
            print(output)
            raise AssertionError(
                f"after Ctrl+C, {step.name} exited {code}"
                + (f" and printed no line matching {gone[0]!r}" if gone else "")
            )
        print(f"{step.name} stopped (exit 0), printing:\n{step.code}", end="")
        return
    raise AssertionError(f"unknown step {step.kind}")


def clean_copy(destination: Path) -> Path:
    """The checkout as a fresh clone plus uncommitted work: git's files, nothing ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        relative = Path(os.fsdecode(raw))
        source = ROOT / relative
        if not source.is_file():  # deleted in the work tree
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return destination


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tutorial", type=Path, default=ROOT / "docs" / "tutorial.md")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary directory.")
    parser.add_argument(
        "--list", action="store_true", help="Only parse the tutorial and list its steps."
    )
    parser.add_argument(
        "--every-block",
        action="store_true",
        help="Require a marker on every code block, not only on shell blocks.",
    )
    args = parser.parse_args()
    steps = parse(args.tutorial.read_text(), every_block=args.every_block)
    if args.list:
        for step in steps:
            print(f"line {step.line}: {step.kind} {step.name or ''} {step.note}".rstrip())
        return 0

    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="cronqueue-tutorial-"))
    home = base / "home"
    home.mkdir()
    (base / "logs").mkdir()
    runner = Runner(
        workdir=home,
        env_file=base / "env.sh",
        first_env_file=base / "first-env.sh",
        cwd_file=base / "cwd",
        logs=base / "logs",
    )
    source = clean_copy(base / "src" / "django-cronqueue")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "PYTHONPATH", "DJANGO_SETTINGS_MODULE", "PYTHONHOME")
    }
    if "VIRTUAL_ENV" in os.environ:  # leave the caller's virtualenv, as a new terminal would
        venv_bin = str(Path(os.environ["VIRTUAL_ENV"]) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env["CRONQUEUE_SRC"] = str(source)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    runner.first_env_file.write_text(
        "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
    )
    shutil.copy(runner.first_env_file, runner.env_file)
    runner.cwd_file.write_text(str(home))
    print(f"Tutorial: {args.tutorial} ({len(steps)} steps), in {home}")
    print(f"CRONQUEUE_SRC={source}")
    failed = None
    try:
        for step in steps:
            run_step(runner, step)
    except AssertionError as exc:
        failed = exc
    finally:
        for name, background in runner.backgrounds.items():
            if background.process.poll() is None:
                os.killpg(background.process.pid, signal.SIGTERM)
                try:
                    background.process.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(background.process.pid, signal.SIGKILL)
            print(f"(stopped {name}, which the tutorial left running)")
        elapsed = time.monotonic() - started
        if failed is None and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    if failed is not None:
        print(f"\nFAILED: {failed}\n(work kept in {base})", file=sys.stderr)
        return 1
    kept = f"; kept {base}" if args.keep else ""
    print(f"\nThe tutorial works: {len(steps)} steps passed in {elapsed:.0f}s{kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
