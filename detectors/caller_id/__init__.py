"""The caller_id dimension (DESIGN §2): is the caller ID trustworthy? STIR/SHAKEN
outcome and attestation plus ANI velocity across the cluster, from a neutral call
metadata record the bridge composes (this package knows nothing of SIP)."""
