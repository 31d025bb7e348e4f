// malformed input MLIR 19's own parser crashes on (mlir-opt-19 segfaults in
// linalg.reduce's parser): dtmc reads MLIR in a child process, so it says so
// and exits 1
module {
  func.func @forward(%x: tensor<2x4xf32> {dtm.role = "input"}) -> tensor<f32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<f32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
    %s = linalg.reduce ins(%x : tensor<2x4xf32>) outs(%f : tensor<f32>) dimensions = [ ,1,0 2]
      (%in: f32, %acc: f32) {
        %a = arith.addf %in, %acc : f32
        linalg.yield %a : f32
      }
    return %s : tensor<f32>
  }
}
