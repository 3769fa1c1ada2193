"""Finding orders: one list request, the sorts, search, go-to, estimates."""
