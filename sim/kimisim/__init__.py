"""simctl, the local rehearsal cluster (docs/sim.md), one module per concern; `sim/simctl` is the entry point."""
