"""Engine builder: rewrites hybrid-model network definitions to ReplaySSM (later issues)."""
