// an op outside the subset dtm imports: the error names it and its line
module {
  func.func @forward(%x: tensor<4x8xf32> {dtm.role = "input"}, %w: tensor<4x8xf32>) -> tensor<f32> {
    %e = tensor.empty() : tensor<4x8xf32>
    %y = linalg.elemwise_unary ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %z = arith.mulf %y, %w : tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %i = tensor.empty() : tensor<f32>
    %f = linalg.fill ins(%zero : f32) outs(%i : tensor<f32>) -> tensor<f32>
    %s = linalg.reduce ins(%z : tensor<4x8xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
      (%in: f32, %acc: f32) {
        %a = arith.addf %in, %acc : f32
        linalg.yield %a : f32
      }
    return %s : tensor<f32>
  }
}
