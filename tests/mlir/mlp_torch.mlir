// The MLP of mlp_hand.mlir in the form torch-mlir's linalg-on-tensors
// lowering writes (torch.nn.Linear + ReLU + MSELoss): every elementwise op a
// linalg.generic with arith in its body, the bias read through a broadcast
// indexing map, ReLU as arith.maximumf with 0, the loss's sum a reduction
// linalg.generic and its mean a division by the count; dtm.* attributes
// only where MLIR has no words (which arguments are data, the inits, the
// axis names).  tests/mlir/train.sh trains it under dp x tp against one
// device.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#all = affine_map<(d0, d1) -> ()>
module attributes {dtm.mesh_axes = ["dp", "tp"]} {
  mesh.mesh @mesh(shape = 2x2)
  func.func @forward(%x: tensor<12x16xf32> {dtm.name = "x", dtm.role = "input"},
                     %y: tensor<12x6xf32> {dtm.name = "y", dtm.role = "input"},
                     %w1: tensor<16x24xf32> {dtm.name = "fc1.weight", dtm.attr = "{init = normal(0, 0.25)}"},
                     %b1: tensor<24xf32> {dtm.name = "fc1.bias", dtm.attr = "{init = normal(0, 0.1)}"},
                     %w2: tensor<24x6xf32> {dtm.name = "fc2.weight", dtm.attr = "{init = normal(0, 0.2)}"},
                     %b2: tensor<6xf32> {dtm.name = "fc2.bias", dtm.attr = "{init = zeros}"}) -> tensor<f32> {
    %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<12x16xf32>
    %ys = mesh.shard %y to <@mesh, [[0]]> : tensor<12x6xf32>
    %w1s = mesh.shard %w1 to <@mesh, [[], [1]]> : tensor<16x24xf32>
    %b1s = mesh.shard %b1 to <@mesh, [[1]]> : tensor<24xf32>
    %w2s = mesh.shard %w2 to <@mesh, [[1]]> : tensor<24x6xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<12x24xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<12x24xf32>) -> tensor<12x24xf32>
    %2 = linalg.matmul ins(%xs, %w1s : tensor<12x16xf32>, tensor<16x24xf32>) outs(%1 : tensor<12x24xf32>) -> tensor<12x24xf32>
    %3 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%2, %b1s : tensor<12x24xf32>, tensor<24xf32>) outs(%0 : tensor<12x24xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %s = arith.addf %in, %in_0 : f32
      linalg.yield %s : f32
    } -> tensor<12x24xf32>
    %4 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<12x24xf32>) outs(%0 : tensor<12x24xf32>) {
    ^bb0(%in: f32, %out: f32):
      %r = arith.maximumf %in, %cst : f32
      linalg.yield %r : f32
    } -> tensor<12x24xf32>
    %5 = tensor.empty() : tensor<12x6xf32>
    %6 = linalg.fill ins(%cst : f32) outs(%5 : tensor<12x6xf32>) -> tensor<12x6xf32>
    %7 = linalg.matmul ins(%4, %w2s : tensor<12x24xf32>, tensor<24x6xf32>) outs(%6 : tensor<12x6xf32>) -> tensor<12x6xf32>
    %8 = linalg.generic {indexing_maps = [#id, #row, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%7, %b2, %ys : tensor<12x6xf32>, tensor<6xf32>, tensor<12x6xf32>) outs(%5 : tensor<12x6xf32>) {
    ^bb0(%in: f32, %in_0: f32, %in_1: f32, %out: f32):
      %o = arith.addf %in, %in_0 : f32
      %d = arith.subf %o, %in_1 : f32
      %q = arith.mulf %d, %d : f32
      linalg.yield %q : f32
    } -> tensor<12x6xf32>
    %9 = tensor.empty() : tensor<f32>
    %10 = linalg.fill ins(%cst : f32) outs(%9 : tensor<f32>) -> tensor<f32>
    %11 = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%8 : tensor<12x6xf32>) outs(%10 : tensor<f32>) {
    ^bb0(%in: f32, %out: f32):
      %a = arith.addf %in, %out : f32
      linalg.yield %a : f32
    } -> tensor<f32>
    %12 = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []} ins(%11 : tensor<f32>) outs(%9 : tensor<f32>) {
    ^bb0(%in: f32, %out: f32):
      %n = arith.constant 7.200000e+01 : f32
      %m = arith.divf %in, %n : f32
      linalg.yield %m : f32
    } -> tensor<f32>
    return %12 : tensor<f32>
  }
}
