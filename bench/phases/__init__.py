"""The suite's phases, one module each; ``run(bench)`` picks the sizes and measures.

throughput  ONE `runworkflows` subprocess + a producer subprocess; also commits per step.
latency     idle worker, sequential 1-step runs after a random idle gap.
replay      in-process: per-step cost of a 1,000-step run vs a 10-step one.
claims      claim latency with 1M finished + 10k parked runs vs an empty table.
attributes  the claim and the run list with and without typed attribute rows; filtered first pages.
memory      worker RSS after 1k and after 50k completed runs.
fanout      one parent starts N children at once and collects their results (start_workflow + wait_all).
starts      in-process: run() one at a time from one thread, and run_many() in bulk.
prune       retention: prune 100,000 expired runs while a thread keeps claiming fresh ones.
scaleout    one worker process vs two draining the same runs; worker vs database CPU per workflow.
"""
