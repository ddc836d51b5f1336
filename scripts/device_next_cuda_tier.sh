#!/usr/bin/env bash
# The whole cuda tier (~435 s on a bare machine in the thirty-third session), run last in a device
# session once the options that won are turned on. Through scripts/device_lib.sh, so it restores
# the Triton kernel cache the session's earlier calls left (carry .device_carry) and saves the
# whole tier's cache for the next session: its cold compile is much of those 435 s. (~8 min)
source scripts/device_lib.sh
cuda_tests pytest_cuda_tier.log 510 tests
