// Read-only file mappings (mapped_file.h).
#include "engine/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/errors.h"

MappedFile::MappedFile(const std::filesystem::path& path) {
    const std::string file = path.string();
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw MoeError(file + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw MoeError(file + ": not a regular file");
    }
    const uint64_t size = uint64_t(st.st_size);
    if (size == 0) {  // mmap refuses a length of 0
        ::close(fd);
        return;
    }
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    ::close(fd);
    if (map == MAP_FAILED) throw MoeError(file + ": mmap failed (" + std::strerror(map_errno) + ")");
    map_ = map;
    size_ = size;
}

MappedFile::~MappedFile() {
    if (map_) ::munmap(map_, size_);
}
