"""Fixtures of the Python producer's tests (helpers in py_producer_stack.py)."""

import os

import pytest

from py_producer_stack import Stack


@pytest.fixture(scope="session")
def stack():
    if not os.environ.get("AWS_ENDPOINT_URL_KINESIS"):
        pytest.skip("needs the local stack's env (awsmp-local up, then source its env file)")
    return Stack()


@pytest.fixture
def stream(stack):
    name = stack.new_stream()
    yield name
    stack.kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
