// base/files.*: the atomic writer replaces regular files only (a device,
// pipe or folder at the target is refused and left as it was), writes
// through a symbolic link to a regular file (the link stays), refuses a link
// to nothing; the streamed writer leaves the target as it was when its
// writer throws; the reader names a folder; looking at a loop of links is a
// MoeError naming the path, never a std::filesystem exception.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "base/errors.h"
#include "base/files.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

void require_refused(const fs::path& path, const std::string& reason) {
    try {
        file_write_atomic(path, "{}\n");
        FAIL("wrote over " << path);
    } catch (const MoeError& e) {
        std::string m = e.what();
        INFO(m);
        REQUIRE(m.rfind(path.string() + ": ", 0) == 0);
        REQUIRE(m.find(reason) != std::string::npos);
        REQUIRE(m.find('\n') == std::string::npos);
    }
}

}  // namespace

TEST_CASE("file_write_atomic replaces regular files only", "[files]") {
    const fs::path dir = test_temp_dir("files-atomic");

    const fs::path regular = dir / "out.json";
    file_write_atomic(regular, "one\n");
    file_write_atomic(regular, "two\n");
    REQUIRE(read_file(regular) == "two\n");

    const fs::path fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    require_refused(fifo, "not a regular file");
    REQUIRE(fs::is_fifo(fs::symlink_status(fifo)));

    const fs::path folder = dir / "folder";
    fs::create_directory(folder);
    require_refused(folder, "not a regular file");
    REQUIRE(fs::is_directory(folder));

    // A link is followed to what it names: a regular file is replaced (the
    // link stays a link), anything else is refused as if named directly.
    const fs::path to_regular = dir / "to-regular";
    fs::create_symlink(regular.filename(), to_regular);
    file_write_atomic(to_regular, "three\n");
    REQUIRE(fs::is_symlink(fs::symlink_status(to_regular)));
    REQUIRE(read_file(regular) == "three\n");

    const fs::path to_fifo = dir / "to-pipe";
    fs::create_symlink(fifo, to_fifo);
    require_refused(to_fifo, "not a regular file");
    REQUIRE(fs::is_fifo(fs::symlink_status(fifo)));
    REQUIRE(fs::is_symlink(fs::symlink_status(to_fifo)));

    const fs::path dangling = dir / "dangling";
    fs::create_symlink(dir / "absent", dangling);
    require_refused(dangling, "symbolic link to nothing");
    REQUIRE_FALSE(fs::exists(dir / "absent"));

    // Nothing left behind by the refusals.
    for (const auto& e : fs::directory_iterator(dir))
        REQUIRE(e.path().filename().string().find(".tmp.") == std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("file_write_atomic_stream streams and leaves the target alone when the writer throws", "[files]") {
    const fs::path dir = test_temp_dir("files-stream");
    const fs::path out = dir / "big.bin";
    file_write_atomic_stream(out, [](std::ostream& o) {
        for (int i = 0; i < 1000; i++) o << "chunk" << i << '\n';
    });
    REQUIRE(read_file(out).substr(0, 14) == "chunk0\nchunk1\n");
    const std::string before = read_file(out);
    REQUIRE_THROWS_WITH(file_write_atomic_stream(out,
                                                 [](std::ostream& o) {
                                                     o << "half";
                                                     throw MoeError("writer failed");
                                                 }),
                        "writer failed");
    REQUIRE(read_file(out) == before);
    for (const auto& e : fs::directory_iterator(dir))
        REQUIRE(e.path().filename().string().find(".tmp.") == std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("file reads name a folder and a loop of links in one line", "[files]") {
    const fs::path dir = test_temp_dir("files-read");
    REQUIRE_THROWS_WITH(file_read_text(dir), dir.string() + ": is a folder, not a file");
    const fs::path loop = dir / "loop";
    fs::create_symlink(loop.filename(), loop);
    REQUIRE_THROWS_WITH(file_exists(loop), Catch::StartsWith(loop.string() + ": cannot access ("));
    REQUIRE_THROWS_AS(file_read_text(loop), MoeError);
    REQUIRE_FALSE(file_exists(dir / "absent"));
    REQUIRE_FALSE(file_exists(dir / "absent" / "deeper"));
    fs::remove_all(dir);
}
