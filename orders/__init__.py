"""The orders app: models, sorts, views, JSON API and CLI around the pagination library."""
