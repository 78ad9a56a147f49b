"""Per-user preferences the dashboard saves on the server: seed 000's DistributedPreferences, the
defaults that prefill the New job form."""
