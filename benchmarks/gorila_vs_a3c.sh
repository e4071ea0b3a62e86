#!/usr/bin/env bash
# Seconds to solve CartPole-v1 (mean 475 over 20 episodes), Gorila DQN next to A3C, 3 seeds
# each, measured in the same session: python benchmarks/time_to_solve.py does the work.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmarks/time_to_solve.py --algos dqn a3c --seeds 0 1 2
