"""What every request passes through: the request path, route declarations, limits, auth, errors."""
