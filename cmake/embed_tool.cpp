// Build-time tool: writes a C++ source holding each input file as a byte
// array plus embedded_file(name) to look them up. Usage: embed_tool OUT IN...
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: embed_tool OUT.cpp FILE...\n");
        return 2;
    }
    std::FILE* out = std::fopen(argv[1], "w");
    if (!out) {
        std::fprintf(stderr, "embed_tool: cannot write %s\n", argv[1]);
        return 2;
    }
    std::fprintf(out, "#include <string_view>\nnamespace {\n");
    std::vector<std::string> names;
    for (int i = 2; i < argc; i++) {
        std::ifstream in(argv[i], std::ios::binary);
        if (!in) {
            std::fprintf(stderr, "embed_tool: cannot read %s\n", argv[i]);
            return 2;
        }
        std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::string path = argv[i];
        names.push_back(path.substr(path.find_last_of('/') + 1));
        std::fprintf(out, "const unsigned char data_%d[] = {", i);
        for (size_t j = 0; j < bytes.size(); j++) std::fprintf(out, "%s%u", j == 0 ? "\n" : (j % 32) ? "," : ",\n", bytes[j]);
        std::fprintf(out, "%s0};\nconst unsigned long size_%d = %zu;\n", bytes.empty() ? "" : ",", i, bytes.size());
    }
    std::fprintf(out, "}\nstd::string_view embedded_file(std::string_view name) {\n");
    for (int i = 2; i < argc; i++)
        std::fprintf(out, "    if (name == \"%s\") return {reinterpret_cast<const char*>(data_%d), size_%d};\n",
                     names[i - 2].c_str(), i, i);
    std::fprintf(out, "    return {};\n}\n");
    std::fclose(out);
    return 0;
}
