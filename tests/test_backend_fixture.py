"""The suite's backend fixture machinery (tests/testkit/backends.py), on pytest's own test runner: the
``backends`` marker deselects the other backends and refuses a marker it cannot apply; under "ascend" a
call the table serves elsewhere skips the test, naming the op, and a case that reaches no Ascend kernel
is reported as skipped."""
import textwrap

pytest_plugins = ["pytester"]

_CONFTEST = textwrap.dedent('''
    import pytest
    from tests.conftest import pytest_runtest_makereport  # noqa: F401 (the suite's report hook)
    from tests.testkit import backends

    def pytest_configure(config):
        config.addinivalue_line("markers", "backends(*names, why): see tests/testkit/backends.py")

    def pytest_collection_modifyitems(config, items):
        backends.deselect_unlisted(config, items)

    class Table:
        def select(self, op, device, *args, **kwargs):
            return ("ascend" if op == "served" else "reference"), (lambda *a, **k: op)

        def run(self, op, device, *args, **kwargs):
            return self.select(op, device, *args, **kwargs)[1](*args, **kwargs)

    TABLE = Table()
    backend = backends.make_backend_fixture("FAKE", TABLE, ["reference", "host", "ascend"])
''')


def _run(pytester, body: str, *args):
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(test_it=textwrap.dedent(body))
    return pytester.runpytest_inprocess("-q", "-rs", "-p", "no:cacheprovider", *args)


def test_marker_deselects_the_other_backends(pytester):
    result = _run(pytester, '''
        import pytest

        @pytest.mark.backends("reference", why="large shape")
        def test_one(backend):
            assert backend == "reference"
    ''')
    result.assert_outcomes(passed=1, deselected=2)


def test_ascend_skips_a_call_served_elsewhere_and_records_the_rest(pytester):
    result = _run(pytester, '''
        import os
        from conftest import TABLE

        def test_served(backend):
            assert os.environ["FAKE_BACKEND"] == backend
            TABLE.run("served", "cpu")
            assert backend != "ascend" or backend.served == ["served"]

        def test_elsewhere(backend):
            TABLE.run("elsewhere", "cpu")
    ''')
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(["*elsewhere: this form is served by the reference on Ascend*"])


def test_an_ascend_case_that_reaches_no_kernel_is_not_a_pass(pytester):
    result = _run(pytester, '''
        def test_argument_check_only(backend):
            assert backend in ("reference", "host", "ascend")
    ''')
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*no call of this case reached an Ascend kernel*"])


def test_marker_misuse_is_refused(pytester):
    for marker, test_args, message in (('"reference"', "backend", "needs why"),
                                       ('"refernce", why="x"', "backend", "takes some of"),
                                       ('"reference", why="x"', "", "without the backend fixture")):
        result = _run(pytester, f'''
            import pytest

            @pytest.mark.backends({marker})
            def test_one({test_args}):
                pass
        ''')
        assert result.ret != 0
        assert message in result.stderr.str(), result.stderr.str()
