"""The verifier's watch on unittest's results: `sitecustomize` for the Python processes of a Django-style
SWE-bench row (`tests/runtests.py`, `python -m unittest`), whose runner is unittest's `TextTestRunner`.

The verifier writes this file's text as `sitecustomize.py` into a folder of its own and puts that folder first
on `PYTHONPATH` for the row's command, so Python imports it at start-up, before any code of the repository
(an image's own `sitecustomize` is imported after it, as Python would have). It then:

- wraps the outcome methods of `unittest.result.TestResult` (`addSuccess`, `addFailure`, `addError`,
  `addSkip`, `addExpectedFailure`, `addUnexpectedSuccess`, `addSubTest`), which every result class calls
  through `super()` (unittest's `TextTestResult`, Django's, and the events Django's parallel runner replays
  in the parent process), and records each test's worst outcome under the name the runner prints before
  ` ... ` (the last line of `getDescription`, else `str(test)`): what `parse_log_django` reads;
- writes `LEGORL-WATCH <nonce> ok <n> <status> <name>` for each outcome to a duplicate, taken at start-up,
  of the file descriptor the verifier names (the exec's stderr, not the stream the runner writes to), and
  `... end <n> <failing>` from an exit handler registered before any code of the repository could register
  one (handlers run last-registered first, so an `os._exit` in a handler of the package's skips it);
- says `... tampered <what>` when one of its wrappers, the `TextTestResult` methods or its own channel was
  replaced when an outcome arrives or at exit.

Processes that run no test print nothing; a fork (Django's parallel workers) prints nothing of its own. The
verifier compares the lines with the statuses the row's parser read (`verifier.watch_disagreements`) and
treats a process that started reporting and never said `end` as tampering. Code of the package runs in the
same process and can, written against this verifier, undo all of it (see `pytest_watch`); what it buys is
that rewriting the runner's stream, or ending the process early with status 0, no longer goes unseen.

The text must run on the Pythons of SWE-bench's Django images (3.5+): no f-strings.
"""

import atexit
import os
import sys

_SETTINGS = {"nonce_path": "", "fd": 9}  # replaced by the verifier when it writes the file
_TAG = "LEGORL-WATCH"
_OUTCOMES = (
    ("addSuccess", "passed"),
    ("addFailure", "failed"),
    ("addError", "error"),
    ("addSkip", "skipped"),
    ("addExpectedFailure", "xfailed"),
    ("addUnexpectedSuccess", "xpassed"),
)
_ORDER = ("error", "failed", "xpassed", "passed", "xfailed", "skipped")


class _UnittestWatch:
    def __init__(self, nonce, fd):
        self.nonce, self.pid = nonce, os.getpid()
        self.out = os.dup(fd)
        self.out_id = _file_id(self.out)
        self.write = os.write
        self.statuses, self.tests, self.started, self.seen = {}, 0, False, set()
        self.recorded = []

    def say(self, *words):
        if os.getpid() == self.pid:
            line = " ".join((_TAG, self.nonce) + tuple(str(w) for w in words))
            self.write(self.out, ("\n" + line + "\n").encode("utf-8", "replace"))

    def install(self):
        import unittest.result

        base = unittest.result.TestResult
        for method, status in _OUTCOMES:
            setattr(base, method, self._wrap(getattr(base, method), status))
        original_subtest = base.addSubTest

        def add_sub_test(result, test, subtest, err, _original=original_subtest):
            if err is not None:
                failed = issubclass(err[0], getattr(test, "failureException", AssertionError))
                self.record(result, test, "failed" if failed else "error")
            return _original(result, test, subtest, err)

        base.addSubTest = add_sub_test
        names = [m for m, _ in _OUTCOMES] + ["addSubTest"]
        self.recorded = [(vars(base), n, vars(base)[n]) for n in names]
        import unittest.runner

        text = unittest.runner.TextTestResult
        self.recorded += [(vars(text), n, vars(text)[n]) for n in vars(text) if callable(vars(text)[n])]
        atexit.register(self.finish)

    def _wrap(self, original, status):
        watch = self

        def outcome(result, test, *args, **kwargs):
            watch.record(result, test, status)
            return original(result, test, *args, **kwargs)

        outcome.__name__ = original.__name__
        return outcome

    def name_of(self, result, test):
        describe = getattr(result, "getDescription", None)
        try:
            text = describe(test) if describe is not None else str(test)
        except Exception:  # noqa: BLE001 - a test whose description fails is still a test
            text = str(test)
        return str(text).split("\n")[-1]

    def record(self, result, test, status):
        if os.getpid() != self.pid:
            return
        if not self.started:
            self.started = True
            self.say("start")
        self.check()
        name = self.name_of(result, test)
        old = self.statuses.get(name)
        self.statuses[name] = status if old is None or _ORDER.index(status) < _ORDER.index(old) else old
        self.tests += 1
        self.say("ok", self.tests, status, name)

    def check(self):
        found = [n for namespace, n, value in self.recorded if namespace.get(n) is not value]
        if _file_id(self.out) != self.out_id:
            found.append("watch output channel")
        for what in found:
            if what not in self.seen:
                self.seen.add(what)
                self.say("tampered", "unittest's " + what + " was replaced")

    def finish(self):
        if self.started and os.getpid() == self.pid:
            self.check()
            failing = sum(1 for s in self.statuses.values() if s in ("failed", "error"))
            self.say("end", self.tests, 0, failing)


def _file_id(fd):
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _start():
    try:
        with open(_SETTINGS["nonce_path"]) as handle:
            nonce = handle.read().strip()
        _UnittestWatch(nonce, _SETTINGS["fd"]).install()
    except (OSError, ImportError):
        return  # no channel or no nonce: this process is not the verifier's to watch


def _chain():
    """Imports the `sitecustomize` this one shadows, as Python would have imported it."""
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        __import__("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if me is not None:
            sys.modules["sitecustomize"] = me


if _SETTINGS["nonce_path"]:
    _start()
    _chain()
