"""Per-user preferences the dashboard saves on the server: TransformerLab's DistributedPreferences, the
defaults that prefill the New job form."""
