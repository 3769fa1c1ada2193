"""What every layer may import: the settings table, the error table, the secret key."""
