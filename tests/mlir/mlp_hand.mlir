// A two-layer MLP written by hand in MLIR's linalg-on-tensors with mesh
// annotations, not exported by dtm: tests/mlir/train.sh trains it with dtm
// under dp x tp and checks the losses against one device.  dtm reads the
// standard dialects (func, arith, math, linalg, tensor, mesh); its own
// attributes say only what MLIR has no words for: which arguments are data
// (dtm.role = "input"; the others are trained) and how params start
// (dtm.attr, as in a .dtm file).  Without dtm.mesh_axes a 2-D mesh's axes
// are dp and tp.
module {
  mesh.mesh @mesh(shape = 2x2)
  func.func @forward(%x: tensor<12x16xf32> {dtm.role = "input"},
                     %y: tensor<12x6xf32> {dtm.role = "input"},
                     %w1: tensor<16x24xf32> {dtm.attr = "{init = normal(0, 0.25)}"},
                     %b1: tensor<24xf32> {dtm.attr = "{init = normal(0, 0.1)}"},
                     %w2: tensor<24x6xf32> {dtm.attr = "{init = normal(0, 0.2)}"}) -> tensor<f32> {
    // the batch over dp; w1 by columns and w2 by rows over tp (Megatron)
    %xs = mesh.shard %x to <@mesh, [[0]]> : tensor<12x16xf32>
    %ys = mesh.shard %y to <@mesh, [[0]]> : tensor<12x6xf32>
    %w1s = mesh.shard %w1 to <@mesh, [[], [1]]> : tensor<16x24xf32>
    %b1s = mesh.shard %b1 to <@mesh, [[1]]> : tensor<24xf32>
    %w2s = mesh.shard %w2 to <@mesh, [[1]]> : tensor<24x6xf32>
    %zero = arith.constant 0.0 : f32
    %e0 = tensor.empty() : tensor<12x24xf32>
    %z0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<12x24xf32>) -> tensor<12x24xf32>
    %xw = linalg.matmul ins(%xs, %w1s : tensor<12x16xf32>, tensor<16x24xf32>)
                        outs(%z0 : tensor<12x24xf32>) -> tensor<12x24xf32>
    %e1 = tensor.empty() : tensor<12x24xf32>
    %b = linalg.broadcast ins(%b1s : tensor<24xf32>) outs(%e1 : tensor<12x24xf32>) dimensions = [0]
    %pre = arith.addf %xw, %b : tensor<12x24xf32>
    %h = math.tanh %pre : tensor<12x24xf32>
    %e2 = tensor.empty() : tensor<12x6xf32>
    %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<12x6xf32>) -> tensor<12x6xf32>
    %out = linalg.matmul ins(%h, %w2s : tensor<12x24xf32>, tensor<24x6xf32>)
                         outs(%z2 : tensor<12x6xf32>) -> tensor<12x6xf32>
    // the loss: mean squared error
    %d = arith.subf %out, %ys : tensor<12x6xf32>
    %sq = arith.mulf %d, %d : tensor<12x6xf32>
    %e3 = tensor.empty() : tensor<f32>
    %z3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<f32>) -> tensor<f32>
    %sum = linalg.reduce ins(%sq : tensor<12x6xf32>) outs(%z3 : tensor<f32>) dimensions = [0, 1]
      (%in: f32, %acc: f32) {
        %a = arith.addf %in, %acc : f32
        linalg.yield %a : f32
      }
    %inv = arith.constant dense<0.0138888889> : tensor<f32>
    %loss = arith.mulf %sum, %inv : tensor<f32>
    return %loss : tensor<f32>
  }
}
