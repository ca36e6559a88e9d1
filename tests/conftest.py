"""Shared test settings: every test has a timeout (pytest-timeout, see pyproject).

Waiting is left at its defaults: with more ranks than cores (4-8 ranks on this
2-core machine) waiters do not spin at all (meshcast._wait.WaitSpec.share_cores).
"""
