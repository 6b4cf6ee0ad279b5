// moe-server entry point: subcommand dispatch. Every MoeError ends here as one
// line on stderr and exit code 2.
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: moe-server <subcommand> ...\n");
        return 2;
    }
    std::fprintf(stderr, "moe-server: unknown subcommand '%s'\n", argv[1]);
    return 2;
}
