"""The CSV export: keyset batches streamed, and the CSV format."""
