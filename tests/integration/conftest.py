"""Tests that run ansible-playbook or ansible-runner for real (on localhost, into temporary directories): make
`ansible_collections.gpufleet.cluster` importable from this checkout, as tests/unit/conftest.py does."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
