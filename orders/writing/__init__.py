"""Writing orders: the input grammar, validation, idempotency keys."""
