"""The Rust coordinator's REST API (`/health`, `/jobs`, ...) at its own root paths, over the canonical
`/api/` views."""
