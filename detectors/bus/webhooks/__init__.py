"""``callshield webhooks``: alerts delivered to PBXs per Standard Webhooks (DESIGN §6)."""
