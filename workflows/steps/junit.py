"""The conformance JUnit file: carried out of the Pod in a container's log, then parsed.

`conformance` adds a `results` container to its Pod that waits for the runner's `done`
marker and prints `junit_01.xml` gzip-compressed and base64-encoded between two marker
lines (`SCRIPT`). `extract` takes the file back out of that log; `parse` reads counts and
failed test names from it. Both fail with a `JUnitError` whose text is deterministic.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from typing import Any

# Only ElementTree is available (defusedxml is not a dependency); `parse` refuses any DTD
# before parsing, so no entity can be declared (no billion laughs, no external entities).
from xml.etree import ElementTree  # nosec B405

FILE = "junit_01.xml"
BEGIN = f"hooksvc-results-begin {FILE} gzip+base64"
END = "hooksvc-results-end"
#: The largest JUnit file accepted, decompressed. A full e2e run's file (~7,200 specs, most
#: skipped) measured about 2 MB; 16 MiB leaves room for long failure messages.
MAX_BYTES = 16 * 1024 * 1024
#: The most of the results container's log read (limitBytes): gzip+base64 shrinks a
#: JUnit file about 7 times, so this is far more than MAX_BYTES needs.
LOG_LIMIT_BYTES = 8 * 1024 * 1024

#: What the results container runs (busybox sh): the runner writes `done` last, after the
#: JUnit file and e2e.log, also when the tests fail.
SCRIPT = (
    'until [ -f "$RESULTS_DIR/done" ]; do sleep 10; done; '
    f'echo "{BEGIN}"; '
    f'if [ -f "$RESULTS_DIR/{FILE}" ]; then gzip -c "$RESULTS_DIR/{FILE}" | base64; fi; '
    f'echo "{END}"'
)

# Ginkgo's suite-level nodes appear as test cases too; they are not specs, so they count
# only when they fail (a failed BeforeSuite fails the run).
_SUITE_NODE = re.compile(
    r"^\[(?:Synchronized)?(?:Before|After)Suite\]|^\[ReportAfterSuite\]|^\[ReportBeforeSuite\]"
    r"|^\[DeferCleanup \(Suite\)\]"
)
_FAILED_STATES = ("failed", "panicked", "timedout", "interrupted", "aborted")


class JUnitError(Exception):
    """The JUnit file could not be read; the text says why, deterministically."""


def extract(log: str) -> bytes | None:
    """The JUnit file from the results container's log; None when the runner wrote none."""
    lines = log.splitlines()
    try:
        start = lines.index(BEGIN)
    except ValueError:
        raise JUnitError("the results container printed no JUnit file") from None
    try:
        stop = lines.index(END, start + 1)
    except ValueError:
        raise JUnitError("the JUnit file in the results container's log is cut short") from None
    encoded = "".join(line.strip() for line in lines[start + 1 : stop])
    if not encoded:
        return None
    try:
        compressed = base64.b64decode(encoded, validate=True)
        inflater = zlib.decompressobj(wbits=31)  # gzip
        # Stop one byte past the cap: a small gzip stream may inflate to gigabytes.
        content = inflater.decompress(compressed, MAX_BYTES + 1)
    except (binascii.Error, zlib.error):
        raise JUnitError("the JUnit file in the results container's log is corrupt") from None
    if len(content) > MAX_BYTES:
        raise JUnitError(f"the JUnit file is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    if not inflater.eof:
        raise JUnitError("the JUnit file in the results container's log is corrupt")
    return content


def _name(case: ElementTree.Element) -> str:
    # Ginkgo may prefix the leaf node's type; the e2e log summary's names have none.
    return re.sub(r"^\[It\]\s+", "", case.get("name", "")).strip()


def parse(content: bytes) -> dict[str, Any]:
    """Passed, failed and skipped counts and the failed tests' names."""
    if len(content) > MAX_BYTES:
        raise JUnitError(f"the JUnit file is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    # Checked as text, not bytes: a UTF-16 file would hide its DTD from a byte search.
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise JUnitError("the JUnit file is not UTF-8") from None
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise JUnitError("the JUnit file declares a DTD, which is refused")
    try:
        # No DTD was let through (checked above), so no entity can be declared.
        root = ElementTree.fromstring(text)  # noqa: S314  # nosec B314
    except ElementTree.ParseError:
        raise JUnitError("the JUnit file is not well-formed XML") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(f"the JUnit file's root is <{root.tag}>, not <testsuites>")
    passed = failed = skipped = 0
    failed_tests: list[str] = []
    for case in root.iter("testcase"):
        name = _name(case)
        if (
            case.find("failure") is not None
            or case.find("error") is not None
            or case.get("status", "") in _FAILED_STATES
        ):
            failed += 1
            if name not in failed_tests:
                failed_tests.append(name)
        elif _SUITE_NODE.match(name):
            continue
        elif case.find("skipped") is not None or case.get("status") in ("skipped", "pending"):
            skipped += 1
        else:
            passed += 1
    if passed + failed + skipped == 0:
        raise JUnitError("the JUnit file has no test cases")
    return {"passed": passed, "failed": failed, "skipped": skipped, "failedTests": failed_tests}
