// DeviceMesh: row-major rank layout and one Comm::split per dimension.
#include "ft/comm/device_mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>

#include "ft/comm/comm.h"
#include "ft/base/error.h"

namespace ft {

std::vector<std::vector<int>> mesh_groups(const std::vector<MeshDim>& dims, size_t axis) {
  int total = 1;
  for (const auto& d : dims) total *= d.size;
  // Row-major: the stride of a dimension is the product of the sizes after it.
  int stride = 1;
  for (size_t i = axis + 1; i < dims.size(); ++i) stride *= dims[i].size;
  const int size = dims[axis].size;
  std::vector<std::vector<int>> out;
  for (int r = 0; r < total; ++r) {
    if ((r / stride) % size != 0) continue;  // not the first of its group
    std::vector<int> group;
    for (int k = 0; k < size; ++k) group.push_back(r + k * stride);
    out.push_back(std::move(group));
  }
  return out;
}

DeviceMesh::DeviceMesh(Comm& world, std::vector<MeshDim> dims, const std::string& what)
    : dims_(std::move(dims)), rank_(world.rank()) {
  if (dims_.empty()) fail("{}: a device mesh needs at least one dimension", what);
  int total = 1;
  std::vector<std::string> shown;
  std::set<std::string> names;
  for (const auto& d : dims_) {
    if (d.size < 1) fail("{}: mesh dimension '{}' has size {}; sizes are >= 1", what, d.name, d.size);
    if (!names.insert(d.name).second) fail("{}: mesh dimension '{}' appears twice", what, d.name);
    total *= d.size;
    shown.push_back(fmt::format("{} {}", d.name, d.size));
  }
  if (total != world.world_size()) {
    fail("{}: the mesh {} holds {} ranks, the job has {}; make the sizes multiply to the world size", what,
         fmt::join(shown, " x "), total, world.world_size());
  }
  for (size_t i = 0; i < dims_.size(); ++i) comms_.push_back(world.split(dims_[i].name, mesh_groups(dims_, i)));
}

DeviceMesh::~DeviceMesh() = default;

size_t DeviceMesh::index_of(const std::string& dim) const {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name == dim) return i;
  }
  fail("device mesh: no dimension '{}'", dim);
}

int DeviceMesh::size(const std::string& dim) const { return dims_[index_of(dim)].size; }
int DeviceMesh::coordinate(const std::string& dim) const { return comms_[index_of(dim)]->rank(); }
Comm& DeviceMesh::comm(const std::string& dim) { return *comms_[index_of(dim)]; }
std::vector<std::vector<int>> DeviceMesh::groups(const std::string& dim) const {
  return mesh_groups(dims_, index_of(dim));
}

std::string DeviceMesh::describe(const std::string& dim_to_list) const {
  std::vector<std::string> sizes, groups_text;
  for (const auto& d : dims_) sizes.push_back(fmt::format("{} {}", d.name, d.size));
  for (const auto& g : groups(dim_to_list)) groups_text.push_back(fmt::format("{{{}}}", fmt::join(g, ",")));
  return fmt::format("{} ({} groups {})", fmt::join(sizes, " x "), dim_to_list, fmt::join(groups_text, " "));
}

}  // namespace ft
