"""A user's suite gets the `loopcheck_machine` fixture from the installed plugin."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_fixture_runs_the_machine_against_an_adapter(pytester) -> None:
    pytester.makepyfile("""
        from hypothesis import strategies as st
        from loopcheck.adapters.torch_sut import TorchSUT
        from loopcheck.model.config import Config

        class CountingAdapter(TorchSUT):
            steps = 0

            def step(self):
                CountingAdapter.steps += 1
                return super().step()

        def test_my_engine(loopcheck_machine):
            stats = loopcheck_machine(CountingAdapter, st.just(Config(num_blocks=12, kv_layout="shared")),
                                      max_examples=5)
            assert stats.examples >= 5 and CountingAdapter.steps > 0
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
