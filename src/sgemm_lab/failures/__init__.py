"""The GPU failure cases: the GPU half of the bad-input catalogue (tests/gpu), run by the pipeline.

- ``cases``: ``pytest tests/gpu`` with a JUnit XML report, read back as rows
- ``step``: the failure_tests step
"""
