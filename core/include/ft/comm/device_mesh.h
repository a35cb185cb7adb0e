// DeviceMesh: the job's ranks as a grid of named dimensions, each with its
// own process group (a Comm::split of the job's Comm).
//
// Rank layout (torch's init_device_mesh uses the same): row-major, the first
// dimension outermost. With dims {replicate: 2, shard: 2} on 4 ranks,
//
//   rank = replicate_index * 2 + shard_index
//   shard groups:     {0, 1}  {2, 3}    (neighbouring ranks: one host when it has 2)
//   replicate groups: {0, 2}  {1, 3}
//
// so the last dimension, whose collectives are the most frequent, takes
// neighbouring ranks, which the launcher places on one host. docs/
// model-parallel.md has the layouts of the strategies that use a mesh.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace ft {

class Comm;

struct MeshDim {
  std::string name;
  int size = 1;
};

class DeviceMesh {
 public:
  /// Builds one sub-group per dimension (collective on `world`: every rank
  /// builds the same mesh). The sizes must multiply to world.world_size();
  /// ft::Error names `what` (e.g. "strategy.options.shard_group_size") otherwise.
  DeviceMesh(Comm& world, std::vector<MeshDim> dims, const std::string& what);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const std::vector<MeshDim>& dims() const { return dims_; }
  int size(const std::string& dim) const;
  /// This rank's index along `dim` (its rank in comm(dim)).
  int coordinate(const std::string& dim) const;
  /// The group of ranks that differ from this one only along `dim`.
  Comm& comm(const std::string& dim);
  /// Every group along `dim`, as job ranks, e.g. {{0, 1}, {2, 3}}.
  std::vector<std::vector<int>> groups(const std::string& dim) const;
  /// One line for the start line, e.g. "replicate 2 x shard 2 (shard groups {0,1} {2,3})".
  std::string describe(const std::string& dim_to_list) const;

 private:
  size_t index_of(const std::string& dim) const;

  std::vector<MeshDim> dims_;
  int rank_ = 0;
  std::vector<std::unique_ptr<Comm>> comms_;  // per dimension
};

/// The groups of the mesh `dims` along dimension `axis` (row-major layout),
/// as ranks 0 .. product-1. Pure arithmetic, shared by DeviceMesh and tests.
std::vector<std::vector<int>> mesh_groups(const std::vector<MeshDim>& dims, size_t axis);

}  // namespace ft
