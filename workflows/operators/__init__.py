"""What people do and see: operator actions on runs, reads for the CLI, and the admin."""
