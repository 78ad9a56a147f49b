"""What every app shares that is not HTTP: the one durable file store (stores). Below every app; it
imports none of them."""
