"""The test bed's regressed llama.cpp (issue 47): one documented source change that lowers speculative acceptance and
nothing else, applied to (or, with --undo, taken out of) a llama.cpp tree's common/sampling.cpp.

    python3 regress_sampling.py <llama.cpp tree or its common/sampling.cpp> [--undo]

The change (common_sampler_sample_and_accept_n): the verifier stops after two drafted tokens per round, as if they had
been rejected from the third on. Every token it emits is still the target's own greedy token, so the text is unchanged
(lossless); only the accepted length per round is capped at 2. Used by build_llama_server_regressed.sh (the test
bed's second build) and by molecule/build (the same change built by role llamacpp_build on real systemd). Standard
library only: it runs on the test hosts too. Applying it twice, or undoing it where it is not, changes nothing.
"""
import os
import sys

ANCHOR = """        if (draft[i] != id || (llama_vocab_is_eog(vocab, id) && i + 1 < draft.size())) {
            break;
        }
"""
CHANGE = ANCHOR + """
        // llmfleet.specdec test bed, the regressed build: stop verifying after two drafted tokens per round
        if (i + 1 > 2) {
            break;
        }
"""


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--undo"):
        sys.exit(__doc__.split("\n\n")[1])
    path = argv[1]
    if os.path.isdir(path):
        path = os.path.join(path, "common", "sampling.cpp")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    undo = len(argv) == 3
    if text.count(CHANGE) == (0 if undo else 1):
        print(f"{path}: {'already as pinned' if undo else 'already regressed'}")
        return 0
    if text.count(ANCHOR) != 1:
        sys.exit(f"{path}: the verifier loop of common_sampler_sample_and_accept_n is not where this script expects it")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace(CHANGE, ANCHOR) if undo else text.replace(ANCHOR, CHANGE))
    print(f"{path}: {'the change taken out' if undo else 'regressed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
